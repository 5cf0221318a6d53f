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
    `orders`.`order_id` AS `order_id`,
    `orders`.`customer_id` AS `customer_id`,
    `orders`.`order_ts` AS `order_ts`,
    `orders`.`updated_at` AS `updated_at`,
    `orders`.`status` AS `status`,
    `orders`.`amount` AS `amount`,
    `orders`.`channel` AS `channel`,
    `orders`.`tags` AS `tags`,
    `orders`.`amount` * 0.8 AS `net`,
    `orders`.`amount` > 100 AS `is_big`
  FROM `__base` AS `orders`
)
SELECT
  `orders`.`order_id` AS `order_id`,
  `orders`.`customer_id` AS `customer_id`,
  `orders`.`order_ts` AS `order_ts`,
  `orders`.`updated_at` AS `updated_at`,
  `orders`.`status` AS `status`,
  `orders`.`amount` AS `amount`,
  `orders`.`channel` AS `channel`,
  `orders`.`tags` AS `tags`,
  `orders`.`net` AS `net`,
  `orders`.`is_big` AS `is_big`,
  `orders`.`net` * 2 AS `net_big`
FROM `__s1` AS `orders`;
