-- model ordering_customers
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  customer_id
FROM __base AS orders;

-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.customers AS customers
), __s1 AS (
  SELECT
    customer_id
  FROM __base AS customers
), __s2 AS (
  SELECT
    *
  FROM __s1
  EXCEPT ALL
  SELECT
    *
  FROM main.v_ordering_customers
)
SELECT
  *
FROM __s2 AS customers;
