-- model m
WITH __base AS (
  SELECT
    *
    REPLACE (ROUND(amount * 1.1, 2) AS amount)
  FROM raw.orders AS orders
)
SELECT
  *
FROM __base;
