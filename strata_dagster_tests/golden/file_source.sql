-- model m
WITH __base AS (
  SELECT
    *
  FROM READ_PARQUET('data/events/*.parquet') AS events
  WHERE
    kind = 'click'
)
SELECT
  *
FROM __base;
