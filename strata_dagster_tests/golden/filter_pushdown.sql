-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
  WHERE
    status <> 'cancelled' AND amount > 10
)
SELECT
  *
FROM __base;
