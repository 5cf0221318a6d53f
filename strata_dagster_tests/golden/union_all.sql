-- model refunds
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
  WHERE
    status = 'returned'
)
SELECT
  order_id,
  -amount AS amount
FROM __base AS orders;

-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    order_id,
    amount
  FROM __base AS orders
), __s2 AS (
  SELECT
    *
  FROM __s1
  UNION ALL
  SELECT
    *
  FROM main.v_refunds
)
SELECT
  *
FROM __s2 AS orders;
