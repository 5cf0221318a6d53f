"""A project with day- and month-partitioned models over one source of orders across many days."""

import datetime as dt
from pathlib import Path

import duckdb

from strata_dagster_tests.support.engine_support import make_module_project

MODULE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model daily {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  group order_day, channel
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
  unique: [order_day, channel]
}

model monthly {
  from daily
  let order_month = cast(date_trunc('month', order_day) as date)
  group order_month
  aggregate revenue = sum(revenue), n = sum(n), days = count(distinct order_day)
  partitioned_by: month(order_month)
}

model by_ts {
  from orders
  filter amount > 0
  select order_id, order_ts, amount
  partitioned_by: day(order_ts)
}
"""

FULL = {
    "daily": "SELECT CAST(order_ts AS DATE) AS order_day, channel, sum(amount) AS revenue, count(*) AS n "
    "FROM raw.orders WHERE status <> 'cancelled' GROUP BY ALL",
    "monthly": "SELECT CAST(date_trunc('month', order_day) AS DATE) AS order_month, sum(revenue) AS revenue, "
    "sum(n) AS n, count(DISTINCT order_day) AS days FROM ({daily}) GROUP BY ALL",
    "by_ts": "SELECT order_id, order_ts, amount FROM raw.orders WHERE amount > 0",
}


# A staging view between the source and a day model: its partitions are still found from the
# source's raw rows (engine.decisions.view_lineage), through the view's filter and computed columns.
VIEW_MODELS = """
model stg_orders {
  from orders
  filter amount > 3
  let order_day = cast(order_ts as date)
  derive net = amount - 1
  materialize: view
}

model daily_v {
  from stg_orders
  filter status <> 'cancelled'
  group order_day, channel
  aggregate revenue = sum(net), n = count(*)
  partitioned_by: day(order_day)
}
"""
FULL["daily_v"] = (
    "SELECT CAST(order_ts AS DATE) AS order_day, channel, sum(amount - 1) AS revenue, count(*) AS n "
    "FROM raw.orders WHERE amount > 3 AND status <> 'cancelled' GROUP BY ALL"
)


def full_query(model: str) -> str:
    return FULL[model].replace("{daily}", FULL["daily"])


def make_project(root: Path, versioning: str = "cdc(updated_at)", module: str = MODULE) -> tuple[Path, Path]:
    return make_module_project(
        root,
        "orders.strata",
        module.replace("versioning: cdc(updated_at)", f"versioning: {versioning}"),
        "CREATE OR REPLACE TABLE raw.orders (order_id BIGINT, order_ts TIMESTAMP, updated_at TIMESTAMP, "
        "status VARCHAR, channel VARCHAR, amount DECIMAL(12, 2))",
    )


def compare_with_full(con: duckdb.DuckDBPyConnection, model: str, full: str) -> dict[str, int]:
    """Live view of `model` vs the full rebuild query `full`: the row count difference and the
    row-hash groups whose counts differ."""
    live = f"SELECT * FROM main.v_{model}"
    groups = con.execute(
        f"SELECT count(*) FROM (SELECT hash(l) h, count(*) c FROM ({live}) l GROUP BY 1) a "
        f"FULL JOIN (SELECT hash(f) h, count(*) c FROM ({full}) f GROUP BY 1) b USING (h) "
        "WHERE a.c IS DISTINCT FROM b.c"
    ).fetchone()[0]
    rows = con.execute(
        f"SELECT (SELECT count(*) FROM ({live})) - (SELECT count(*) FROM ({full}))"
    ).fetchone()[0]
    return {"rows": rows, "groups": groups}


def compare(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, object]:
    """Live view vs full rebuild: row counts, row-hash groups that differ, numeric totals."""
    live = f"SELECT * FROM main.v_{model}"
    full = full_query(model)
    return {
        **compare_with_full(con, model, full),
        "totals": con.execute(
            f"SELECT (SELECT sum(revenue) FROM ({live})) IS NOT DISTINCT FROM (SELECT sum(revenue) FROM ({full}))"
        ).fetchone()[0]
        if model != "by_ts"
        else True,
    }


# Partitioned models over orders joined to a customer dimension (a source without change signal):
# a left join `using` in an aggregate, and an inner join `on` keeping rows.
JOINED_MODULE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

source customers {
  table: raw.customers
}

model region_daily {
  from orders
  let order_day = cast(order_ts as date)
  join left customers using (customer_id)
  filter status <> 'cancelled'
  group order_day, coalesce(region, 'unknown') as region
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
}

model segment_orders {
  from orders
  join customers on orders.customer_id = customers.customer_id
  select orders.order_id, orders.order_ts, orders.amount, customers.segment
  partitioned_by: day(order_ts)
}
"""

JOINED_FULL = {
    "region_daily": "SELECT CAST(o.order_ts AS DATE) AS order_day, coalesce(c.region, 'unknown') AS region, "
    "sum(o.amount) AS revenue, count(*) AS n FROM raw.orders o LEFT JOIN raw.customers c USING (customer_id) "
    "WHERE o.status <> 'cancelled' GROUP BY ALL",
    "segment_orders": "SELECT o.order_id, o.order_ts, o.amount, c.segment FROM raw.orders o "
    "JOIN raw.customers c ON o.customer_id = c.customer_id",
}


def make_joined_project(root: Path) -> tuple[Path, Path]:
    return make_module_project(
        root,
        "orders.strata",
        JOINED_MODULE,
        "CREATE OR REPLACE TABLE raw.orders (order_id BIGINT, customer_id BIGINT, order_ts TIMESTAMP, "
        "updated_at TIMESTAMP, status VARCHAR, amount DECIMAL(12, 2))",
        "CREATE OR REPLACE TABLE raw.customers (customer_id BIGINT, name VARCHAR, region VARCHAR, segment VARCHAR)",
    )


def compare_joined(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, object]:
    """Live view vs full rebuild of a model of JOINED_MODULE: row counts and row-hash groups."""
    return compare_with_full(con, model, JOINED_FULL[model])


# -- property tests: seeded sources, then a history of changes checked against full rebuilds -----

START = dt.datetime(2026, 1, 1)
EQUAL = {"rows": 0, "groups": 0, "totals": True}  # `compare` of a model equal to its full rebuild
SEED_ORDERS = (
    "INSERT INTO raw.orders SELECT range, ? + to_minutes(range * 360), ? + to_minutes(range * 360), "
    "CASE WHEN range % 7 = 0 THEN 'cancelled' ELSE 'paid' END, CASE WHEN range % 2 = 0 THEN 'web' ELSE 'shop' END, "
    "range % 40 + 1 FROM range(300)"
)
SEED_CUSTOMERS = (
    "INSERT INTO raw.customers SELECT range, 'c' || range, CASE WHEN range % 2 = 0 THEN 'n' ELSE 's' END, "
    "CASE WHEN range % 3 = 0 THEN 'business' ELSE 'consumer' END FROM range(1, 26)"
)
SEED_JOINED_ORDERS = (
    "INSERT INTO raw.orders SELECT range, range % 30 + 1, ? + to_minutes(range * 360), ? + to_minutes(range * 360), "
    "CASE WHEN range % 7 = 0 THEN 'cancelled' ELSE 'paid' END, range % 40 + 1 FROM range(300)"
)


def seed(warehouse: Path, *statements: str) -> None:
    """Run `statements`, each `?` of them taking START (the first order's time)."""
    con = duckdb.connect(str(warehouse))
    try:
        for statement in statements:
            con.execute(statement, [START] * statement.count("?"))
    finally:
        con.close()


def make_seeded_project(
    root: Path, versioning: str = "cdc(updated_at)", module: str = MODULE
) -> tuple[Path, Path]:
    """`make_project` with 300 orders over 75 days."""
    project, warehouse = make_project(root, versioning, module)
    seed(warehouse, SEED_ORDERS)
    return project, warehouse


def make_seeded_joined_project(root: Path) -> tuple[Path, Path]:
    """`make_joined_project` with 25 customers and 300 orders of 30 customer ids."""
    project, warehouse = make_joined_project(root)
    seed(warehouse, SEED_CUSTOMERS, SEED_JOINED_ORDERS)
    return project, warehouse
