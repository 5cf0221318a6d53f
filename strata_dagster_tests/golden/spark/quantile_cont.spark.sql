SELECT
  CAST(PERCENTILE(`orders`.`amount`, 0.5) AS DECIMAL(12, 2)) AS `q`,
  PERCENTILE(`orders`.`order_id`, 0.5) AS `m`
FROM `raw`.`orders` AS `orders`;
