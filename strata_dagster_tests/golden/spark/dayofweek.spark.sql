SELECT
  (
    DAYOFWEEK(`orders`.`order_ts`) - 1
  ) AS `dow`,
  (
    WEEKDAY(`orders`.`order_ts`) + 1
  ) AS `iso`,
  (
    DAYOFWEEK(`orders`.`order_ts`) - 1
  ) AS `part`
FROM `raw`.`orders` AS `orders`;
