-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    *,
    amount * 0.8 AS net,
    amount > 100 AS is_big
  FROM __base AS orders
)
SELECT
  *,
  net * 2 AS net_big
FROM __s1 AS orders;
