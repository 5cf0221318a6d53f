SELECT status LIKE 'a\_%' AS l FROM raw.orders
