SELECT date_diff('month', order_ts, updated_at) AS months, date_diff('hour', order_ts, updated_at) AS hours FROM raw.orders
