-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    *,
    SUM(amount) OVER (PARTITION BY customer_id ORDER BY order_id) AS running
  FROM __base AS orders
  LEFT JOIN raw.customers AS customers
    USING (customer_id)
)
SELECT
  *
FROM __s1 AS orders
WHERE
  region = 'north';
