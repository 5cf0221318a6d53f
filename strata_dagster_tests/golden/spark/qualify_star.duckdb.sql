SELECT * FROM raw.orders QUALIFY row_number() OVER (PARTITION BY customer_id ORDER BY order_id) = 1
