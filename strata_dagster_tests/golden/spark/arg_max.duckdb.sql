SELECT arg_max(channel, order_id) AS latest_channel FROM raw.orders
