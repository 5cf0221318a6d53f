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
    ROW_NUMBER() OVER (
      PARTITION BY `orders`.`customer_id`
      ORDER BY `orders`.`order_ts` NULLS LAST, `orders`.`order_id` NULLS LAST
    ) AS `rank_in_customer`
  FROM raw.orders AS `orders`
  WHERE
    `orders`.`status` <> 'cancelled'
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
  `orders`.`rank_in_customer` AS `rank_in_customer`
FROM `__base` AS `orders`
WHERE
  `orders`.`rank_in_customer` = 1;
