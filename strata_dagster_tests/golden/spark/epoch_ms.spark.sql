SELECT
  UNIX_MILLIS(CAST(`orders`.`order_ts` AS TIMESTAMP)) AS `ms`,
  CAST(TIMESTAMP_MILLIS(`orders`.`order_id`) AS TIMESTAMP_NTZ) AS `ts`
FROM `raw`.`orders` AS `orders`;
