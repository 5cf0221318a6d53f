-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  *
  REPLACE (UPPER(status) AS status)
FROM __base AS orders;
