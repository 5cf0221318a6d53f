SELECT
  LOG10(`orders`.`amount`) AS `log10`,
  LOG(2, `orders`.`amount`) AS `log2`
FROM `raw`.`orders` AS `orders`;
