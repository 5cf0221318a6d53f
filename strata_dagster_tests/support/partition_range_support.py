"""A day- and month-partitioned project (partition_support.MODULE) with an unpartitioned model, over
orders on every day of January and February 2026, and helpers to change them and read partitions."""

from pathlib import Path

import duckdb

from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.partition_support import full_query, make_project

ORDERS_PER_DAY = 3
DAYS = 59  # 2026-01-01 .. 2026-02-28
UNPARTITIONED = """
model order_amounts {
  from orders
  select order_id, amount
}
"""


def day(number: int) -> str:
    """`2026-01-<number>` for 1..31, then February's days."""
    return f"2026-01-{number:02d}" if number <= 31 else f"2026-02-{number - 31:02d}"


def make_range_project(root: Path) -> tuple[Path, Path]:
    project, warehouse = make_project(root)
    module = project / "orders.strata"
    module.write_text(module.read_text() + UNPARTITIONED)
    execute(
        warehouse,
        "INSERT INTO raw.orders SELECT i, TIMESTAMP '2026-01-01' + to_days(CAST(i // ? AS INTEGER)) "
        "+ to_hours(CAST(i % ? AS INTEGER)), TIMESTAMP '2026-06-01' + to_seconds(i), 'paid', "
        "CASE WHEN i % 2 = 0 THEN 'web' ELSE 'shop' END, 10 + i FROM range(?) t(i)",
        params=[ORDERS_PER_DAY, ORDERS_PER_DAY, ORDERS_PER_DAY * DAYS],
    )
    return project, warehouse


def change_day(warehouse: Path, order_day: str, *, is_silent: bool = False, amount: int = 1000) -> None:
    """Add `amount` to the orders of `order_day`; stamped as a writer does (a later `updated_at`)
    unless `is_silent`: then the cdc contract hides the change from change detection."""
    stamp = "" if is_silent else ", updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND"
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + ?{stamp} WHERE CAST(order_ts AS DATE) = CAST(? AS DATE)",
        params=[amount, order_day],
    )


def partition_rows(warehouse: Path, relation: str, column: str = "order_day") -> dict[str, list]:
    """Row-hash multiset of each partition of `relation` (a live view or a full query)."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute(
            f"SELECT CAST(CAST({column} AS DATE) AS VARCHAR), list(hash(r) ORDER BY hash(r)) "
            f"FROM ({relation}) r GROUP BY 1"
        ).fetchall()
    finally:
        con.close()
    return dict(rows)


def live_days(warehouse: Path) -> dict[str, list]:
    return partition_rows(warehouse, "SELECT * FROM main.v_daily")


def full_days(warehouse: Path) -> dict[str, list]:
    return partition_rows(warehouse, full_query("daily"))
