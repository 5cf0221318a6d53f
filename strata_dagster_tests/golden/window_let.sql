-- model m
WITH __base AS (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY order_ts, order_id) AS rank_in_customer
  FROM raw.orders AS orders
  WHERE
    status <> 'cancelled'
)
SELECT
  *
FROM __base AS orders
WHERE
  rank_in_customer = 1;
