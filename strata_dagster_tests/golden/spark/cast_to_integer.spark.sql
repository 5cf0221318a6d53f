SELECT
  CAST(ROUND(`orders`.`amount`) AS INT) AS `a`,
  CAST(RINT(CAST(`orders`.`amount` AS DOUBLE)) AS BIGINT) AS `b`
FROM `raw`.`orders` AS `orders`;
