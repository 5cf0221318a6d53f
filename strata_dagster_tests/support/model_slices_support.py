"""Plain models over other models, maintained from their inputs' new segments (engine.builds.model_slices):
row-wise by the input's key, a window function by its PARTITION BY, a `union all` of append
inputs, and a day-partitioned aggregate over an upsert model."""

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

-- The inputs: an upsert whose filter drops cancelled orders, an append log, an append_new, a
-- plain model over a source maintained row-wise by day(updated_at), and a replace dimension.
model stg {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}

model log {
  from orders
  select order_id, customer_id, status, amount, updated_at
  incremental
  merge_strategy: append
  cdc_column: updated_at
}

model first_seen {
  from orders
  select order_id, order_ts, amount, updated_at
  incremental
  merge_strategy: append_new
  merge_keys: [order_id]
  cdc_column: updated_at
}

model rw {
  from orders
  filter amount > 3
  select order_id, customer_id, order_ts, updated_at, status, amount
}

model cust {
  from customers
  derive is_north = region = 'n'
}

-- Row-wise over an upsert model, by its key: expand and a keyed left join to a changing model.
model tags {
  from stg
  join left cust using (customer_id)
  let labels = [status, channel]
  expand labels as tag
  select order_id, order_day, tag, amount, region
}

-- A window function over an upsert model, by its PARTITION BY (a join `on` with a same-named key).
model numbered {
  from stg
  join left cust on stg.customer_id = cust.customer_id
  select stg.order_id, stg.customer_id, stg.amount, coalesce(cust.region, '?') as region,
    row_number() over (partition by stg.customer_id order by stg.order_ts, stg.order_id) as nth,
    sum(stg.amount) over (partition by stg.customer_id) as customer_total
}

-- A window over a row-wise model (slices of day(updated_at) replaced by its segments).
model ranked {
  from rw
  derive rank_in_customer = rank() over (partition by customer_id order by amount desc, order_id)
}

-- Row-wise over the row-wise model, by its slices.
model rw_large {
  from rw
  filter amount >= 20
  derive doubled = amount * 2
}

-- A union all of two inputs that only gain rows.
model timeline {
  from first_seen
  select order_id, 'placed' as what, amount
  union all log_short
}

model log_short {
  from log
  select order_id, status as what, amount
}

-- A day-partitioned aggregate over an upsert model joined to a changing model.
model daily {
  from stg
  join left cust using (customer_id)
  group order_day, coalesce(region, '?') as region
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
}
"""

STG = "SELECT *, CAST(order_ts AS DATE) AS order_day FROM raw.orders WHERE status <> 'cancelled'"
CUST = "SELECT *, region = 'n' AS is_north FROM raw.customers"
RW = "SELECT order_id, customer_id, order_ts, updated_at, status, amount FROM raw.orders WHERE amount > 3"

FULL = {
    "tags": f"SELECT s.order_id, s.order_day, t.tag, s.amount, c.region FROM ({STG}) s LEFT JOIN ({CUST}) c "
    "USING (customer_id), unnest([s.status, s.channel]) AS t(tag)",
    "numbered": f"SELECT s.order_id, s.customer_id, s.amount, coalesce(c.region, '?') AS region, "
    "row_number() OVER (PARTITION BY s.customer_id ORDER BY s.order_ts, s.order_id) AS nth, "
    f"sum(s.amount) OVER (PARTITION BY s.customer_id) AS customer_total FROM ({STG}) s "
    f"LEFT JOIN ({CUST}) c ON s.customer_id = c.customer_id",
    "ranked": f"SELECT *, rank() OVER (PARTITION BY customer_id ORDER BY amount DESC, order_id) AS rank_in_customer "
    f"FROM ({RW})",
    "rw_large": f"SELECT *, amount * 2 AS doubled FROM ({RW}) WHERE amount >= 20",
    # The append log keeps every version of an order: the full rebuild of its history is itself.
    "timeline": "SELECT order_id, 'placed' AS what, amount FROM main.v_first_seen "
    "UNION ALL SELECT order_id, status, amount FROM main.v_log",
    "daily": f"SELECT s.order_day, coalesce(c.region, '?') AS region, sum(s.amount) AS revenue, count(*) AS n "
    f"FROM ({STG}) s LEFT JOIN ({CUST}) c USING (customer_id) GROUP BY ALL",
}
SLICED_MODELS = ("tags", "numbered", "ranked", "rw_large", "timeline", "daily")

ORDERS = (
    "CREATE OR REPLACE TABLE raw.orders (order_id BIGINT, customer_id BIGINT, order_ts TIMESTAMP, "
    "updated_at TIMESTAMP, status VARCHAR, channel VARCHAR, amount DECIMAL(12, 2))"
)


def make_project(root: Path, module: str = MODULE) -> tuple[Path, Path]:
    project, warehouse = make_module_project(
        root,
        "orders.strata",
        module,
        ORDERS,
        "CREATE OR REPLACE TABLE raw.customers (customer_id BIGINT, region VARCHAR)",
    )
    con = duckdb.connect(str(warehouse))
    try:
        con.execute(
            "INSERT INTO raw.customers SELECT range, CASE WHEN range % 2 = 0 THEN 'n' ELSE 's' END FROM range(10)"
        )
        con.execute(
            "INSERT INTO raw.orders SELECT range, range % 12, ? + to_minutes(range * 360), "
            "? + to_minutes(range * 360), CASE WHEN range % 7 = 0 THEN 'cancelled' ELSE 'paid' END, "
            "CASE WHEN range % 2 = 0 THEN 'web' ELSE 'shop' END, range % 40 + 1 FROM range(120)",
            [START, START],
        )
    finally:
        con.close()
    return project, warehouse


def compare(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, int]:
    """Live view vs full rebuild: row count difference and row-hash groups whose counts differ."""
    return compare_with_full(con, model, FULL[model])
