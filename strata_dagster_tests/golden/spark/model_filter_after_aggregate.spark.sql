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
    `orders`.`tags` AS `tags`
  FROM raw.orders AS `orders`
), `__s1` AS (
  SELECT
    `orders`.`customer_id` AS `customer_id`,
    CAST(SUM(`orders`.`amount`) AS DECIMAL(38, 2)) AS `revenue`
  FROM `__base` AS `orders`
  GROUP BY
    `orders`.`customer_id`
)
SELECT
  `orders`.`customer_id` AS `customer_id`,
  `orders`.`revenue` AS `revenue`
FROM `__s1` AS `orders`
WHERE
  `orders`.`revenue` > 100;
