-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  order_id,
  amount * 2 AS double_amount,
  status
FROM __base AS orders;
