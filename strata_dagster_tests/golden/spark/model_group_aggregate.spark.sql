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
    CAST(`orders`.`order_ts` AS DATE) AS `order_day`
  FROM raw.orders AS `orders`
)
SELECT
  `orders`.`order_day` AS `order_day`,
  UPPER(`orders`.`channel`) AS `channel`,
  CAST(SUM(`orders`.`amount`) AS DECIMAL(38, 2)) AS `revenue`,
  COUNT(*) AS `orders`
FROM `__base` AS `orders`
GROUP BY
  `orders`.`order_day`,
  UPPER(`orders`.`channel`);
