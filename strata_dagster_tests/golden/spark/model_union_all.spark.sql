-- model refunds
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
    `orders`.`status` = 'returned'
)
SELECT
  `orders`.`order_id` AS `order_id`,
  -`orders`.`amount` AS `amount`
FROM `__base` AS `orders`;

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
    `orders`.`amount` AS `amount`
  FROM `__base` AS `orders`
), `__s2` AS (
  SELECT
    `__s1`.`order_id` AS `order_id`,
    `__s1`.`amount` AS `amount`
  FROM `__s1` AS `__s1`
  UNION ALL
  SELECT
    `refunds`.`order_id` AS `order_id`,
    `refunds`.`amount` AS `amount`
  FROM main.v_refunds AS `refunds`
)
SELECT
  `orders`.`order_id` AS `order_id`,
  `orders`.`amount` AS `amount`
FROM `__s2` AS `orders`;
