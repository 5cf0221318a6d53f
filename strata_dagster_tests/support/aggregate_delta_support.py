"""Day-partitioned aggregates over an upsert model, maintained from its delta (engine.builds.aggregate_delta):
every aggregate it maintains with NULL keys, NULL values and a NULL partition; one without
count(*); one summing floats (always recomputed); and the full rebuild of each."""

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

source customers {
  table: raw.customers
}

model stg {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}

model cust {
  from customers
}

-- Every aggregate the delta maintains; region is NULL for orders of unknown customers, order_day
-- for orders with no timestamp (the NULL partition), amount and qty for some orders.
model daily_all {
  from stg
  join left cust using (customer_id)
  filter amount is null or amount <> 13
  group order_day, region
  aggregate n = count(*),
    priced = count(amount),
    revenue = sum(amount),
    units = sum(qty),
    buyers = count(distinct customer_id),
    channels = count(distinct channel),
    low = min(amount),
    high = max(amount),
    first_order = min(order_ts),
    last_channel = max(channel)
  partitioned_by: day(order_day)
}

-- No count(*): a group that loses rows and gains none may be gone, so its day is recomputed.
model daily_sums {
  from stg
  group order_day, channel
  aggregate revenue = sum(amount), buyers = count(distinct customer_id)
  partitioned_by: day(order_day)
}

-- A sum of floats does not add up exactly: every affected day is recomputed. (The test's floats
-- are multiples of 0.25, so that any order of summation gives the same bits.)
model daily_float {
  from stg
  group order_day
  aggregate weight = sum(ratio), n = count(*)
  partitioned_by: day(order_day)
}
"""

STG = "SELECT *, CAST(order_ts AS DATE) AS order_day FROM raw.orders WHERE status <> 'cancelled'"
FULL = {
    "daily_all": "SELECT s.order_day, c.region, count(*) AS n, count(s.amount) AS priced, sum(s.amount) AS revenue, "
    "sum(s.qty) AS units, count(DISTINCT s.customer_id) AS buyers, count(DISTINCT s.channel) AS channels, "
    "min(s.amount) AS low, max(s.amount) AS high, min(s.order_ts) AS first_order, max(s.channel) AS last_channel "
    f"FROM ({STG}) s LEFT JOIN raw.customers c USING (customer_id) "
    "WHERE s.amount IS NULL OR s.amount <> 13 GROUP BY ALL",
    "daily_sums": "SELECT order_day, channel, sum(amount) AS revenue, count(DISTINCT customer_id) AS buyers "
    f"FROM ({STG}) GROUP BY ALL",
    "daily_float": f"SELECT order_day, sum(ratio) AS weight, count(*) AS n FROM ({STG}) GROUP BY ALL",
}
MAINTAINED_MODELS = ("daily_all", "daily_sums")
MODELS = (*MAINTAINED_MODELS, "daily_float")

ORDERS = (
    "CREATE OR REPLACE TABLE raw.orders (order_id BIGINT, customer_id BIGINT, order_ts TIMESTAMP, "
    "updated_at TIMESTAMP, status VARCHAR, channel VARCHAR, amount DECIMAL(12, 2), qty INTEGER, ratio DOUBLE)"
)


def make_project(root: Path) -> tuple[Path, Path]:
    project, warehouse = make_module_project(
        root,
        "orders.strata",
        MODULE,
        ORDERS,
        "CREATE OR REPLACE TABLE raw.customers (customer_id BIGINT, region VARCHAR)",
    )
    con = duckdb.connect(str(warehouse))
    try:
        con.execute("INSERT INTO raw.customers SELECT range, ['n', 's', 'e'][range % 3 + 1] FROM range(8)")
        # 60 orders over 6 days; customers 8 and 9 have no row in customers (region NULL).
        con.execute(
            "INSERT INTO raw.orders SELECT range, range % 10, "
            "CASE WHEN range % 17 = 5 THEN NULL ELSE ? + to_minutes(range * 144) END, ?, "
            "CASE WHEN range % 9 = 0 THEN 'cancelled' ELSE 'paid' END, ['web', 'shop', 'app'][range % 3 + 1], "
            "CASE WHEN range % 11 = 0 THEN NULL ELSE range % 15 + 1 END, "
            "CASE WHEN range % 4 = 0 THEN NULL ELSE range % 5 END, (range % 7) / 4.0 FROM range(60)",
            [START, START],
        )
    finally:
        con.close()
    return project, warehouse


def compare(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, int]:
    """Live view vs full rebuild: row count difference and row-hash groups whose counts differ."""
    return compare_with_full(con, model, FULL[model])
