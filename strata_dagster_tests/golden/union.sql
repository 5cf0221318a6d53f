-- model customer_ids
WITH __base AS (
  SELECT
    *
  FROM raw.customers AS customers
)
SELECT
  customer_id
FROM __base AS customers;

-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    customer_id
  FROM __base AS orders
), __s2 AS (
  SELECT
    *
  FROM __s1
  UNION
  SELECT
    *
  FROM main.v_customer_ids
)
SELECT
  *
FROM __s2 AS orders;
