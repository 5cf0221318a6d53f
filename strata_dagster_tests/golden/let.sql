-- model m
WITH __base AS (
  SELECT
    *,
    CAST(order_ts AS DATE) AS order_day,
    DATE_TRUNC('MONTH', CAST(order_ts AS DATE)) AS order_month
  FROM raw.orders AS orders
  WHERE
    CAST(order_ts AS DATE) >= CAST('2025-02-01' AS DATE)
)
SELECT
  *
FROM __base;
