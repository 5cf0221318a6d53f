SELECT 1 / 0 AS inf, amount / order_id AS ratio FROM raw.orders
