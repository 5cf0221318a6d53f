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
  COALESCE(`orders`.`customer_id`, `customers`.`customer_id`) AS `customer_id`,
  `orders`.`order_ts` AS `order_ts`,
  `orders`.`updated_at` AS `updated_at`,
  `orders`.`status` AS `status`,
  `orders`.`amount` AS `amount`,
  `orders`.`channel` AS `channel`,
  `orders`.`tags` AS `tags`,
  `customers`.`name` AS `name`,
  `customers`.`region` AS `region`,
  `customers`.`segment` AS `segment`,
  `customers`.`signup_date` AS `signup_date`
FROM `__base` AS `orders`
LEFT JOIN raw.customers AS `customers`
  ON `orders`.`customer_id` = `customers`.`customer_id`
WHERE
  `customers`.`region` = 'EU';
