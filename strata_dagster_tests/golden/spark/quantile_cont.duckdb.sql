SELECT quantile_cont(amount, 0.5) AS q, median(order_id) AS m FROM raw.orders
