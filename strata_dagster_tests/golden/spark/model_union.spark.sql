-- model customer_ids
WITH `__base` AS (
  SELECT
    `customers`.`customer_id` AS `customer_id`,
    `customers`.`name` AS `name`,
    `customers`.`region` AS `region`,
    `customers`.`segment` AS `segment`,
    `customers`.`signup_date` AS `signup_date`
  FROM raw.customers AS `customers`
)
SELECT
  `customers`.`customer_id` AS `customer_id`
FROM `__base` AS `customers`;

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
    `orders`.`customer_id` AS `customer_id`
  FROM `__base` AS `orders`
), `__s2` AS (
  SELECT
    `__s1`.`customer_id` AS `customer_id`
  FROM `__s1` AS `__s1`
  UNION
  SELECT
    `customer_ids`.`customer_id` AS `customer_id`
  FROM main.v_customer_ids AS `customer_ids`
)
SELECT
  `orders`.`customer_id` AS `customer_id`
FROM `__s2` AS `orders`;
