-- model m2
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
  CAST(`orders`.`order_ts` AS DATE) AS `order_day`,
  `orders`.`channel` AS `region`,
  `orders`.`amount` AS `revenue`,
  0 AS `copy_no`
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
    `orders`.`tags` AS `tags`,
    CAST(`orders`.`order_ts` AS DATE) AS `order_day`
  FROM raw.orders AS `orders`
  WHERE
    `orders`.`status` <> 'cancelled'
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
    `orders`.`order_day` AS `order_day`,
    `orders`.`amount` * 0.8 AS `net`
  FROM `__base` AS `orders`
  LEFT JOIN raw.customers AS `customers`
    ON `orders`.`customer_id` = `customers`.`customer_id`
), `__s2` AS (
  SELECT
    `orders`.`order_day` AS `order_day`,
    `orders`.`region` AS `region`,
    CAST(SUM(`orders`.`net`) AS DECIMAL(38, 2)) AS `revenue`,
    COUNT(*) AS `orders`
  FROM `__s1` AS `orders`
  GROUP BY
    `orders`.`order_day`,
    `orders`.`region`
), `__s3` AS (
  SELECT
    `orders`.`order_day` AS `order_day`,
    `orders`.`region` AS `region`,
    `orders`.`revenue` AS `revenue`
  FROM `__s2` AS `orders`
  WHERE
    `orders`.`orders` > 1
), `__s4` AS (
  SELECT
    `orders`.`order_day` AS `order_day`,
    `orders`.`region` AS `region`,
    `orders`.`revenue` AS `revenue`,
    EXPLODE(ARRAY(1, 2)) AS `copy_no`
  FROM `__s3` AS `orders`
), `__s5` AS (
  SELECT
    `__s4`.`order_day` AS `order_day`,
    `__s4`.`region` AS `region`,
    `__s4`.`revenue` AS `revenue`,
    `__s4`.`copy_no` AS `copy_no`
  FROM `__s4` AS `__s4`
  UNION ALL
  SELECT
    `m2`.`order_day` AS `order_day`,
    `m2`.`region` AS `region`,
    `m2`.`revenue` AS `revenue`,
    `m2`.`copy_no` AS `copy_no`
  FROM main.v_m2 AS `m2`
)
SELECT
  `orders`.`order_day` AS `order_day`,
  `orders`.`region` AS `region`,
  `orders`.`revenue` AS `revenue`,
  `orders`.`copy_no` AS `copy_no`
FROM `__s5` AS `orders`;
