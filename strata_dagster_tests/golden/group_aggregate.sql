-- model m
WITH __base AS (
  SELECT
    *,
    CAST(order_ts AS DATE) AS order_day
  FROM raw.orders AS orders
)
SELECT
  order_day,
  UPPER(channel) AS channel,
  SUM(amount) AS revenue,
  COUNT(*) AS orders
FROM __base AS orders
GROUP BY
  order_day,
  UPPER(channel);
