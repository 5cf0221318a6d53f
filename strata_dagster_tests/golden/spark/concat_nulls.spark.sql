SELECT
  CONCAT(COALESCE(`orders`.`status`, ''), COALESCE(CAST(`orders`.`order_id` AS STRING), '')) AS `c`
FROM `raw`.`orders` AS `orders`;
