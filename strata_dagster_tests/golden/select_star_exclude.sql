-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    *
    EXCLUDE (tags)
  FROM __base AS orders
)
SELECT
  *,
  status = 'paid' AS is_paid
FROM __s1 AS orders;
