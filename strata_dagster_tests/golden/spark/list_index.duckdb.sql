SELECT tags[1] AS first, tags[-1] AS last, tags[order_id] AS nth FROM raw.orders
