SELECT regexp_replace(status, '(a)', '<\1>', 'g') AS marked, regexp_matches(status, '^p', 'i') AS p FROM raw.orders
