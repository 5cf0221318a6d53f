SELECT
  `orders`.`customer_id` AS `customer_id`,
  IF(
    SIZE(COLLECT_LIST(STRUCT(`orders`.`status` AS v, `orders`.`order_ts` AS k0))) = 0,
    NULL,
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(`orders`.`status` AS v, `orders`.`order_ts` AS k0)),
        (l, r) -> CASE
          WHEN l.k0 IS NULL AND r.k0 IS NULL
          THEN 0
          WHEN l.k0 IS NULL
          THEN 1
          WHEN r.k0 IS NULL
          THEN -1
          WHEN l.k0 < r.k0
          THEN 1
          WHEN l.k0 > r.k0
          THEN -1
          ELSE 0
        END
      ),
      __e -> __e.v
    )
  ) AS `statuses`
FROM `raw`.`orders` AS `orders`
GROUP BY
  `orders`.`customer_id`;
