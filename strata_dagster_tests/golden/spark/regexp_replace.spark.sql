SELECT
  REGEXP_REPLACE(`orders`.`status`, '(a)', '<$1>') AS `marked`,
  `orders`.`status` RLIKE '(?i)^p' AS `p`
FROM `raw`.`orders` AS `orders`;
