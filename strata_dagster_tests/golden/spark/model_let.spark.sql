-- model m
WITH `__base` AS (
  SELECT
    `orders`.`order_id` AS `order_id`,
    `orders`.`customer_id` AS `customer_id`,
    `orders`.`order_ts` AS `order_ts`,
    `orders`.`updated_at` AS `updated_at`,
    `orders`.`status` AS `status`,
    `orders`.`amount` AS `amount`,
    `orders`.`channel` AS `channel`,
    `orders`.`tags` AS `tags`,
    CAST(`orders`.`order_ts` AS DATE) AS `order_day`,
    CAST(DATE_TRUNC('MONTH', CAST(`orders`.`order_ts` AS DATE)) AS TIMESTAMP_NTZ) AS `order_month`
  FROM raw.orders AS `orders`
  WHERE
    CAST(`orders`.`order_ts` AS DATE) >= CAST('2025-02-01' AS DATE)
)
SELECT
  `__base`.`order_id` AS `order_id`,
  `__base`.`customer_id` AS `customer_id`,
  `__base`.`order_ts` AS `order_ts`,
  `__base`.`updated_at` AS `updated_at`,
  `__base`.`status` AS `status`,
  `__base`.`amount` AS `amount`,
  `__base`.`channel` AS `channel`,
  `__base`.`tags` AS `tags`,
  `__base`.`order_day` AS `order_day`,
  `__base`.`order_month` AS `order_month`
FROM `__base` AS `__base`;
