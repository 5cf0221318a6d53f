WITH __base AS (SELECT * FROM raw.orders) SELECT * FROM __base UNION ALL SELECT * FROM (WITH __base AS (SELECT * FROM raw.orders) SELECT * FROM __base) AS other
