"""Shared set-up for business-driven versioning tests: hive-partitioned Parquet folders and tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb

from strata_dagster_tests.support.engine_support import execute

START = dt.date(2026, 3, 1)
GATES = """  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true"""

# The two models every business test project reads its source through.
MODELS = """model events_log {
  from events
  incremental
  merge_strategy: append
  cdc_column: dt
}
model daily_totals {
  from events
  group dt
  aggregate n = count(*), total = sum(amount)
  partitioned_by: day(dt)
}
"""

FILE_MODULE = (
    """
source events {
  path: 'events/*/*.parquet'
  partitioned_by: dt
  start: 2026-03-01
%(gates)s
%(extra)s
}
"""
    + MODELS
)

TABLE_MODULE = (
    """
source events {
  table: raw.events
  partitioned_by: dt
  start: 2026-03-01
%(gates)s
%(extra)s
}
"""
    + MODELS
)


def day(index: int, start: dt.date = START) -> dt.date:
    return start + dt.timedelta(days=index)


def make_file_project(root: Path, extra: str = "", start: dt.date = START) -> tuple[Path, Path]:
    project = root / "project"
    (project / "events").mkdir(parents=True, exist_ok=True)
    module = FILE_MODULE.replace(f"start: {START.isoformat()}", f"start: {start.isoformat()}")
    (project / "events.strata").write_text(module % {"gates": GATES, "extra": extra})
    return project, root / "w.duckdb"


def make_table_project(root: Path, extra: str = "") -> tuple[Path, Path]:
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "events.strata").write_text(TABLE_MODULE % {"gates": GATES, "extra": extra})
    warehouse = root / "w.duckdb"
    execute(
        warehouse,
        "CREATE SCHEMA IF NOT EXISTS raw",
        "CREATE TABLE IF NOT EXISTS raw.events (id BIGINT, amount BIGINT, dt DATE)",
    )
    return project, warehouse


def write_file_partition(
    project: Path,
    index: int,
    rows: int,
    *,
    seed: int = 0,
    part: int = 0,
    marker: str | None = None,
    start: dt.date = START,
) -> Path:
    """`events/dt=<day>/part-<part>.parquet` with `rows` rows (ids and amounts from `seed`)."""
    folder = project / "events" / f"dt={day(index, start).isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{part}.parquet"
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT {index} * 100000 + {seed} * 1000 + range AS id, (range * 7 + {seed}) % 13 AS amount "
            f"FROM range({rows})) TO '{path}' (FORMAT parquet)"
        )
    finally:
        con.close()
    if marker is not None:
        (folder / marker).write_text("")
    return path


def write_table_partition(warehouse: Path, index: int, rows: int, *, seed: int = 0) -> None:
    execute(
        warehouse,
        "INSERT INTO raw.events SELECT ? * 100000 + ? * 1000 + range, (range * 7 + ?) % 13, ? FROM range(?)",
        params=[index, seed, seed, day(index), rows],
    )


def full_events_log(source: str) -> str:
    return f"SELECT id, amount, dt FROM {source}"


def full_daily_totals(source: str) -> str:
    return f"SELECT dt, count(*) AS n, sum(amount) AS total FROM {source} GROUP BY dt"
