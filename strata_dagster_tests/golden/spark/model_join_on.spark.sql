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
  WHERE
    `orders`.`amount` > 0
)
SELECT
  `orders`.`order_id` AS `order_id`,
  `customers`.`region` AS `region`,
  `orders`.`amount` AS `amount`
FROM `__base` AS `orders`
JOIN raw.customers AS `customers`
  ON `orders`.`customer_id` = `customers`.`customer_id`
WHERE
  `customers`.`segment` = 'retail';
