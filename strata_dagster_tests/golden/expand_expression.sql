-- model m
WITH __base AS (
  SELECT
    *
  FROM raw.orders AS orders
)
SELECT
  *,
  UNNEST(STR_SPLIT(status, 'a')) AS part
FROM __base AS orders;
