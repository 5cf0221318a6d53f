SELECT
  MAX_BY(`orders`.`channel`, IF(`orders`.`channel` IS NULL, NULL, `orders`.`order_id`)) AS `latest_channel`
FROM `raw`.`orders` AS `orders`;
