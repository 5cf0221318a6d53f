SELECT
  `order_id`,
  `customer_id`,
  `order_ts`,
  `updated_at`,
  `status`,
  `amount`,
  `channel`,
  `tags`
FROM (
  SELECT
    `orders`.`order_id` AS `order_id`,
    `orders`.`customer_id` AS `customer_id`,
    `orders`.`order_ts` AS `order_ts`,
    `orders`.`updated_at` AS `updated_at`,
    `orders`.`status` AS `status`,
    `orders`.`amount` AS `amount`,
    `orders`.`channel` AS `channel`,
    `orders`.`tags` AS `tags`,
    ROW_NUMBER() OVER (PARTITION BY `orders`.`customer_id` ORDER BY `orders`.`order_id` NULLS LAST) AS _w
  FROM `raw`.`orders` AS `orders`
) AS _t
WHERE
  _w = 1;
