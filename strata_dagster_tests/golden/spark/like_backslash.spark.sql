SELECT
  `orders`.`status` LIKE 'a\\_%' ESCAPE '!' AS `l`
FROM `raw`.`orders` AS `orders`;
