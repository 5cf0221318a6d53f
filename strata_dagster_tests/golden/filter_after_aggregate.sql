-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    customer_id,
    SUM(amount) AS revenue
  FROM __base AS orders
  GROUP BY
    customer_id
)
SELECT
  *
FROM __s1 AS orders
WHERE
  revenue > 100;
