-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  SUM(amount) AS total,
  COUNT(*) AS n
FROM __base AS orders;
