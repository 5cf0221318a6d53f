SELECT order_id, status FROM raw.orders UNION ALL BY NAME SELECT name AS status, customer_id FROM raw.customers
