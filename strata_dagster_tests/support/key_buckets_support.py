"""Row-wise models over keyed sources with no change column (engine/builds/key_buckets.py)."""

import datetime as dt
from pathlib import Path

import duckdb

from strata_dagster_tests.support.engine_support import make_module_project
from strata_dagster_tests.support.partition_support import compare_with_full

START = dt.datetime(2026, 1, 1)

MODULE = """
-- No change column: the key comes from the upsert reading it.
source orders {
  table: raw.orders
}

-- No change column: a declared key that is no integer (hash buckets), nor unique.
source placed {
  table: raw.placed
  key: [status]
}

-- Neither key nor change column.
source loose {
  table: raw.loose
}

source customers {
  table: raw.customers
}

model latest {
  from orders
  select order_id, status, updated_at
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}

-- Row-wise over `orders`, sliced by buckets of order_id.
model stg {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  derive is_large = amount >= 30
  select order_id, customer_id, order_day, status, amount, is_large
}

-- Row-wise over `placed`, with a keyed inner join to a source without change signal.
model placed_region {
  from placed
  join customers on placed.customer_id = customers.customer_id
  filter placed.amount > 5
  select placed.order_id, placed.status, placed.amount, customers.region
}

-- Row-wise over `orders` by blocks of order_id, with a keyed join: a changed customer reaches
-- the blocks of its orders, the NULL one included.
model orders_region {
  from orders
  join customers on orders.customer_id = customers.customer_id
  select orders.order_id, orders.amount, customers.region
}

-- Built in full: its source says nothing narrower than "changed".
model loose_copy {
  from loose
  select order_id, amount
}

-- Downstream of a bucket-sliced model: a day-partitioned aggregate.
model daily {
  from stg
  group order_day
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
}
"""

FULL = {
    "stg": "SELECT order_id, customer_id, CAST(order_ts AS DATE) AS order_day, status, amount, "
    "amount >= 30 AS is_large FROM raw.orders WHERE status <> 'cancelled'",
    "placed_region": "SELECT p.order_id, p.status, p.amount, c.region FROM raw.placed p "
    "JOIN raw.customers c ON p.customer_id = c.customer_id WHERE p.amount > 5",
    "orders_region": "SELECT o.order_id, o.amount, c.region FROM raw.orders o "
    "JOIN raw.customers c ON o.customer_id = c.customer_id",
    "loose_copy": "SELECT order_id, amount FROM raw.loose",
    "daily": "SELECT CAST(order_ts AS DATE) AS order_day, sum(amount) AS revenue, count(*) AS n FROM raw.orders "
    "WHERE status <> 'cancelled' GROUP BY ALL",
}
BUCKETED = ("stg", "placed_region", "orders_region")
TABLES = ("orders", "placed", "loose")

ORDERS = (
    "CREATE OR REPLACE TABLE raw.{table} (order_id BIGINT, customer_id BIGINT, order_ts TIMESTAMP, "
    "updated_at TIMESTAMP, status VARCHAR, amount DECIMAL(12, 2))"
)


def make_project(root: Path, module: str = MODULE) -> tuple[Path, Path]:
    project, warehouse = make_module_project(
        root,
        "orders.strata",
        module,
        *(ORDERS.format(table=table) for table in TABLES),
        "CREATE OR REPLACE TABLE raw.customers (customer_id BIGINT, region VARCHAR)",
    )
    con = duckdb.connect(str(warehouse))
    try:
        con.execute(
            "INSERT INTO raw.customers SELECT range, CASE WHEN range % 2 = 0 THEN 'n' ELSE 's' END FROM range(20)"
        )
        for table in TABLES:
            con.execute(
                f"INSERT INTO raw.{table} SELECT range, range % 25, ? + to_minutes(range * 360), "
                "? + to_minutes(range * 360), CASE WHEN range % 7 = 0 THEN 'cancelled' ELSE 'paid' END, "
                "range % 40 + 1 FROM range(200)",
                [START, START],
            )
    finally:
        con.close()
    return project, warehouse


def compare(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, int]:
    """Live view vs full rebuild: row count difference and row-hash groups whose counts differ."""
    return compare_with_full(con, model, FULL[model])


def assert_all_equal_full(warehouse: Path, context: object) -> None:
    """Every model of FULL equals its full rebuild; `context` names the change in a failure."""
    con = duckdb.connect(str(warehouse))
    try:
        for model in FULL:
            assert compare(con, model) == {"rows": 0, "groups": 0}, (model, context)
    finally:
        con.close()
