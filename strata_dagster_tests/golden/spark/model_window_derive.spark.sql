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
    `customers`.`signup_date` AS `signup_date`,
    CAST(SUM(`orders`.`amount`) OVER (
      PARTITION BY COALESCE(`orders`.`customer_id`, `customers`.`customer_id`)
      ORDER BY `orders`.`order_id` NULLS LAST
    ) AS DECIMAL(38, 2)) AS `running`
  FROM `__base` AS `orders`
  LEFT JOIN raw.customers AS `customers`
    ON `orders`.`customer_id` = `customers`.`customer_id`
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
  `orders`.`name` AS `name`,
  `orders`.`region` AS `region`,
  `orders`.`segment` AS `segment`,
  `orders`.`signup_date` AS `signup_date`,
  `orders`.`running` AS `running`
FROM `__s1` AS `orders`
WHERE
  `orders`.`region` = 'north';
