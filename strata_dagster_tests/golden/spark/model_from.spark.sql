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
)
SELECT
  `__base`.`order_id` AS `order_id`,
  `__base`.`customer_id` AS `customer_id`,
  `__base`.`order_ts` AS `order_ts`,
  `__base`.`updated_at` AS `updated_at`,
  `__base`.`status` AS `status`,
  `__base`.`amount` AS `amount`,
  `__base`.`channel` AS `channel`,
  `__base`.`tags` AS `tags`
FROM `__base` AS `__base`;
