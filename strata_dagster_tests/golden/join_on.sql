-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
  WHERE
    orders.amount > 0
)
SELECT
  orders.order_id,
  customers.region,
  orders.amount
FROM __base AS orders
JOIN raw.customers AS customers
  ON orders.customer_id = customers.customer_id
WHERE
  customers.segment = 'retail';
