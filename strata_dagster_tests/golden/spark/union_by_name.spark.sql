SELECT
  `__l`.`order_id` AS `order_id`,
  `__l`.`status` AS `status`,
  NULL AS `customer_id`
FROM (
  SELECT
    `orders`.`order_id` AS `order_id`,
    `orders`.`status` AS `status`
  FROM `raw`.`orders` AS `orders`
) AS __l
UNION ALL
SELECT
  NULL AS `order_id`,
  `__r`.`status` AS `status`,
  `__r`.`customer_id` AS `customer_id`
FROM (
  SELECT
    `customers`.`name` AS `status`,
    `customers`.`customer_id` AS `customer_id`
  FROM `raw`.`customers` AS `customers`
) AS __r;
