SELECT
  SIZE(`orders`.`tags`) AS `n`,
  LENGTH(`orders`.`status`) AS `chars`,
  SIZE(FILTER(`orders`.`tags`, __e -> NOT __e IS NULL)) AS `non_null`
FROM `raw`.`orders` AS `orders`;
