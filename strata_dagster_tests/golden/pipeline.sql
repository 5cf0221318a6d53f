-- model m2
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  CAST(order_ts AS DATE) AS order_day,
  channel AS region,
  amount AS revenue,
  0 AS copy_no
FROM __base AS orders;

-- model m
WITH __base AS (
  SELECT
    *,
    CAST(order_ts AS DATE) AS order_day
  FROM raw.orders AS orders
  WHERE
    status <> 'cancelled'
), __s1 AS (
  SELECT
    *
    EXCLUDE (order_day),
    orders.order_day,
    amount * 0.8 AS net
  FROM __base AS orders
  LEFT JOIN raw.customers AS customers
    USING (customer_id)
), __s2 AS (
  SELECT
    order_day,
    region,
    SUM(net) AS revenue,
    COUNT(*) AS orders
  FROM __s1 AS orders
  GROUP BY
    order_day,
    region
), __s3 AS (
  SELECT
    order_day,
    region,
    revenue
  FROM __s2 AS orders
  WHERE
    orders > 1
), __s4 AS (
  SELECT
    *,
    UNNEST([1, 2]) AS copy_no
  FROM __s3 AS orders
), __s5 AS (
  SELECT
    *
  FROM __s4
  UNION ALL
  SELECT
    *
  FROM main.v_m2
)
SELECT
  *
FROM __s5 AS orders;
