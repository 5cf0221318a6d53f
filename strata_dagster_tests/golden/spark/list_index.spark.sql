SELECT
  TRY_ELEMENT_AT(`orders`.`tags`, 1) AS `first`,
  TRY_ELEMENT_AT(`orders`.`tags`, -1) AS `last`,
  TRY_ELEMENT_AT(`orders`.`tags`, CAST(NULLIF(`orders`.`order_id`, 0) AS INT)) AS `nth`
FROM `raw`.`orders` AS `orders`;
