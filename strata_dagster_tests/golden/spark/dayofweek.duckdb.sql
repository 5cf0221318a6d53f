SELECT dayofweek(order_ts) AS dow, isodow(order_ts) AS iso, date_part('dow', order_ts) AS part FROM raw.orders
