SELECT epoch_ms(order_ts) AS ms, epoch_ms(order_id) AS ts FROM raw.orders
