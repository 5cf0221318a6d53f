-- model ordering_customers
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
  `orders`.`customer_id` AS `customer_id`
FROM `__base` AS `orders`;

-- model m
WITH `__base` AS (
  SELECT
    `customers`.`customer_id` AS `customer_id`,
    `customers`.`name` AS `name`,
    `customers`.`region` AS `region`,
    `customers`.`segment` AS `segment`,
    `customers`.`signup_date` AS `signup_date`
  FROM raw.customers AS `customers`
), `__s1` AS (
  SELECT
    `customers`.`customer_id` AS `customer_id`
  FROM `__base` AS `customers`
), `__s2` AS (
  SELECT
    `__s1`.`customer_id` AS `customer_id`
  FROM `__s1` AS `__s1`
  EXCEPT ALL
  SELECT
    `ordering_customers`.`customer_id` AS `customer_id`
  FROM main.v_ordering_customers AS `ordering_customers`
)
SELECT
  `customers`.`customer_id` AS `customer_id`
FROM `__s2` AS `customers`;
