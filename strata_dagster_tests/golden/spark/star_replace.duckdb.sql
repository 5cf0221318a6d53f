SELECT * EXCLUDE (tags) REPLACE (amount * 2 AS amount) FROM raw.orders
