SELECT
  (
    (
      YEAR(`orders`.`updated_at`) - YEAR(`orders`.`order_ts`)
    ) * 12 + MONTH(`orders`.`updated_at`) - MONTH(`orders`.`order_ts`)
  ) AS `months`,
  (
    (
      (
        UNIX_MICROS(CAST(`orders`.`updated_at` AS TIMESTAMP)) - PMOD(UNIX_MICROS(CAST(`orders`.`updated_at` AS TIMESTAMP)), 3600000000)
      ) DIV 3600000000
    ) - (
      (
        UNIX_MICROS(CAST(`orders`.`order_ts` AS TIMESTAMP)) - PMOD(UNIX_MICROS(CAST(`orders`.`order_ts` AS TIMESTAMP)), 3600000000)
      ) DIV 3600000000
    )
  ) AS `hours`
FROM `raw`.`orders` AS `orders`;
