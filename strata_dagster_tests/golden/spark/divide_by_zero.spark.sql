SELECT
  (
    CASE
      WHEN CAST(0 AS DOUBLE) = 0
      THEN CAST(1 AS DOUBLE) * CAST('Infinity' AS DOUBLE)
      ELSE TRY_DIVIDE(CAST(1 AS DOUBLE), CAST(0 AS DOUBLE))
    END
  ) AS `inf`,
  (
    CASE
      WHEN CAST(`orders`.`order_id` AS DOUBLE) = 0
      THEN CAST(`orders`.`amount` AS DOUBLE) * CAST('Infinity' AS DOUBLE)
      ELSE TRY_DIVIDE(CAST(`orders`.`amount` AS DOUBLE), CAST(`orders`.`order_id` AS DOUBLE))
    END
  ) AS `ratio`
FROM `raw`.`orders` AS `orders`;
