-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  *
FROM __base;
