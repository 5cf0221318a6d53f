"""Plain models over a cdc source and a partitioned source, maintained row-wise without declarations."""

import datetime as dt
from pathlib import Path

import duckdb

from strata_dagster_tests.support.engine_support import make_module_project
from strata_dagster_tests.support.partition_support import compare_with_full

START = dt.datetime(2026, 1, 1)

MODULE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

source placed {
  table: raw.placed
  partitioned_by: day(order_ts)
  start: 2026-01-01
}

source customers {
  table: raw.customers
}

-- Row-wise over a cdc source: filter, let, derive, select.
model stg {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  derive is_large = amount >= 30, net = amount - 1
  select order_id, customer_id, order_day, updated_at, status, amount, is_large, net
}

-- Row-wise with a keyed inner join to a source without change signal.
model stg_region {
  from orders
  join customers on orders.customer_id = customers.customer_id
  filter orders.amount > 5
  select orders.order_id, orders.updated_at, orders.amount, customers.region
}

-- Row-wise over a partitioned source (whole-row fingerprints per day), expand included.
model placed_items {
  from placed
  filter status <> 'cancelled'
  let tags = [status, channel]
  expand tags as tag
  select order_id, order_ts, tag, amount
}

-- Downstream of a row-wise model: a day-partitioned aggregate.
model daily {
  from stg
  group order_day
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
}
"""

FULL = {
    "stg": "SELECT order_id, customer_id, CAST(order_ts AS DATE) AS order_day, updated_at, status, amount, "
    "amount >= 30 AS is_large, amount - 1 AS net FROM raw.orders WHERE status <> 'cancelled'",
    "stg_region": "SELECT o.order_id, o.updated_at, o.amount, c.region FROM raw.orders o "
    "JOIN raw.customers c ON o.customer_id = c.customer_id WHERE o.amount > 5",
    "placed_items": "SELECT order_id, order_ts, tag, amount FROM raw.placed, unnest([status, channel]) AS t(tag) "
    "WHERE status <> 'cancelled'",
    "daily": "SELECT CAST(order_ts AS DATE) AS order_day, sum(amount) AS revenue, count(*) AS n FROM raw.orders "
    "WHERE status <> 'cancelled' GROUP BY ALL",
}
ROW_WISE_MODELS = ("stg", "stg_region", "placed_items")

ORDERS = (
    "CREATE OR REPLACE TABLE raw.{table} (order_id BIGINT, customer_id BIGINT, order_ts TIMESTAMP, "
    "updated_at TIMESTAMP, status VARCHAR, channel VARCHAR, amount DECIMAL(12, 2))"
)


def make_project(root: Path, module: str = MODULE) -> tuple[Path, Path]:
    project, warehouse = make_module_project(
        root,
        "orders.strata",
        module,
        ORDERS.format(table="orders"),
        ORDERS.format(table="placed"),
        "CREATE OR REPLACE TABLE raw.customers (customer_id BIGINT, region VARCHAR)",
    )
    con = duckdb.connect(str(warehouse))
    try:
        con.execute(
            "INSERT INTO raw.customers SELECT range, CASE WHEN range % 2 = 0 THEN 'n' ELSE 's' END FROM range(20)"
        )
        for table in ("orders", "placed"):
            con.execute(
                f"INSERT INTO raw.{table} SELECT range, range % 25, ? + to_minutes(range * 360), "
                "? + to_minutes(range * 360), CASE WHEN range % 7 = 0 THEN 'cancelled' ELSE 'paid' END, "
                "CASE WHEN range % 2 = 0 THEN 'web' ELSE 'shop' END, range % 40 + 1 FROM range(200)",
                [START, START],
            )
    finally:
        con.close()
    return project, warehouse


def compare(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, int]:
    """Live view vs full rebuild: row count difference and row-hash groups whose counts differ."""
    return compare_with_full(con, model, FULL[model])
