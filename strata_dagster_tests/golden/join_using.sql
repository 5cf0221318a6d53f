-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  *
FROM __base AS orders
LEFT JOIN raw.customers AS customers
  USING (customer_id)
WHERE
  region = 'EU';
