SELECT * FROM raw.orders FULL JOIN raw.customers USING (customer_id)
