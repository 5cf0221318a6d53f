SELECT concat(status, order_id) AS c FROM raw.orders
