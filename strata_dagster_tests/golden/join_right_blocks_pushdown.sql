-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  *
FROM __base AS orders
RIGHT JOIN raw.customers AS customers
  USING (customer_id)
WHERE
  amount > 0;
