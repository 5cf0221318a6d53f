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
    `orders`.`channel` AS `channel`
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
  `orders`.`status` = 'paid' AS `is_paid`
FROM `__s1` AS `orders`;
