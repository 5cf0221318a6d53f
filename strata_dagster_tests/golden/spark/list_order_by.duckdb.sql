SELECT customer_id, list(status ORDER BY order_ts DESC) AS statuses FROM raw.orders GROUP BY customer_id
