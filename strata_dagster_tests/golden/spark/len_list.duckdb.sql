SELECT len(tags) AS n, len(status) AS chars, list_count(tags) AS non_null FROM raw.orders
