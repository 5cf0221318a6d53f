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
  `orders`.`order_id` AS `order_id`,
  `orders`.`customer_id` AS `customer_id`,
  `orders`.`order_ts` AS `order_ts`,
  `orders`.`updated_at` AS `updated_at`,
  `orders`.`status` AS `status`,
  `orders`.`amount` AS `amount`,
  `orders`.`channel` AS `channel`,
  `orders`.`tags` AS `tags`,
  EXPLODE(SPLIT(`orders`.`status`, CONCAT('\\Q', 'a', '\\E'))) AS `part`
FROM `__base` AS `orders`;
