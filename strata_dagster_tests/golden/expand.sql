-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
), __s1 AS (
  SELECT
    *
    EXCLUDE (tags),
    UNNEST(tags) AS tag
  FROM __base AS orders
)
SELECT
  *
FROM __s1 AS orders
WHERE
  tag <> 'gift';
