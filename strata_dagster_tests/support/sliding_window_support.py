"""Shared set-up for `sliding_window(N)` tests: a folder of daily Parquet drops of (id, kind, amount)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from strata_dagster_tests.support.business_support import day
from strata_dagster_tests.support.engine_support import row_multiset

MODULE = """
source events {
  path: 'events/*/*.parquet'
  partitioned_by: dt
  start: 2026-03-01
  versioning: sliding_window(%(size)d)
  immutable_partitions: true
  monotonic_partitions: true
}
model window_totals {
  from events
  filter coalesce(kind, '') <> 'z'
  group kind
  aggregate n = count(*), total = sum(amount), twice = sum(amount * 2 + 1), mean = avg(amount),
            amounts = count(amount), lo = min(amount), hi = max(amount), ids = count(distinct amount)
}
model window_rows {
  from events
  filter amount > 2
}
"""

FULL_TOTALS = """SELECT kind, count(*) AS n, sum(amount) AS total, sum(amount * 2 + 1) AS twice,
  avg(amount) AS mean, count(amount) AS amounts, min(amount) AS lo, max(amount) AS hi,
  count(DISTINCT amount) AS ids FROM {window} WHERE coalesce(kind, '') <> 'z' GROUP BY kind"""
FULL_ROWS = "SELECT * FROM {window} WHERE amount > 2"


def make_window_project(root: Path, size: int) -> tuple[Path, Path]:
    project = root / "project"
    (project / "events").mkdir(parents=True, exist_ok=True)
    (project / "events.strata").write_text(MODULE % {"size": size})
    return project, root / "w.duckdb"


def write_drop(project: Path, index: int, rows: list[tuple[str, int | None]]) -> Path:
    """`events/dt=<day>/part-0.parquet` holding (id, kind, amount) rows (an empty drop has none)."""
    folder = project / "events" / f"dt={day(index).isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "part-0.parquet"
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE drop_rows (id BIGINT, kind VARCHAR, amount BIGINT)")
        if rows:
            con.executemany(
                "INSERT INTO drop_rows VALUES (?, ?, ?)",
                [(index * 1000 + number, kind, amount) for number, (kind, amount) in enumerate(rows)],
            )
        con.execute(f"COPY drop_rows TO '{path}' (FORMAT parquet)")
    finally:
        con.close()
    return path


def remove_drop(project: Path, index: int) -> None:
    shutil.rmtree(project / "events" / f"dt={day(index).isoformat()}")


def window_relation(project: Path, first: int, last: int) -> str:
    """The drops `first`..`last` (inclusive) as a relation, read straight from the files."""
    files = f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"
    return (
        f"(SELECT * FROM {files} WHERE dt BETWEEN DATE '{day(first).isoformat()}' "
        f"AND DATE '{day(last).isoformat()}')"
    )


def assert_window_models_equal_full(warehouse: Path, window: str) -> None:
    for view, query in (("window_totals", FULL_TOTALS), ("window_rows", FULL_ROWS)):
        expected = row_multiset(warehouse, f"({query.format(window=window)})")
        assert row_multiset(warehouse, f"main.v_{view}") == expected, view
