-- model m
WITH __base AS (
  SELECT
    *
  FROM parquet.`data/events/*.parquet` AS events
  WHERE
    kind = 'click'
)
SELECT
  *
FROM __base;
