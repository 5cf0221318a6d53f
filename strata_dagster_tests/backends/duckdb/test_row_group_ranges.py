"""Ranges chosen from the files' row-group statistics (backends.duckdb.row_groups): the share of rows a
read of a few day ranges cannot skip, and a partition build that finds the rows it replaces by
many ranges where the previous state's rows are clustered by the partition column."""

import datetime as dt

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb import row_groups
from strata_dagster.backends.sql.figures import content_of
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.run import run_project
from strata_dagster.state.history import HistoryReader
from strata_dagster_tests.support.engine_support import make_module_project, sql
from strata_dagster_tests.support.partition_support import compare_with_full

DAY = dt.date(2026, 1, 1)


def _write(path, order: str, row_group_size: int = 1000) -> None:
    con = duckdb.connect()
    try:
        con.execute(
            "COPY (SELECT range AS id, TIMESTAMP '2026-01-01' + to_minutes(range) AS t FROM range(20 * 1440) "
            f"ORDER BY {order}) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE {row_group_size})"
        )
    finally:
        con.close()


def _days(*offsets: int) -> list[tuple[dt.date, dt.date]]:
    return [(DAY + dt.timedelta(days=n), DAY + dt.timedelta(days=n + 1)) for n in offsets]


def test_the_share_read_follows_how_the_rows_are_clustered(tmp_path):
    clustered, shuffled = tmp_path / "clustered.parquet", tmp_path / "shuffled.parquet"
    _write(clustered, "t")
    _write(shuffled, "hash(id)")
    con = duckdb.connect()
    try:
        two_days = _days(3, 11)
        # 20 days of one row a minute in small row groups (DuckDB writes at least 2,048 rows to
        # each): the two days' row groups, at least their tenth of the rows.
        share = row_groups.share_read(con, [str(clustered)], "t", "TIMESTAMP", two_days)
        assert 0.1 <= share < 0.35
        assert row_groups.share_read(con, [str(shuffled)], "t", "TIMESTAMP", two_days) == 1.0
        # Both files together: the shares weighted by rows.
        both = row_groups.share_read(con, [str(clustered), str(shuffled)], "t", "TIMESTAMP", two_days)
        assert abs(both - (share + 1.0) / 2) < 1e-9
        # A range no row group reaches, and a column the files do not have.
        assert row_groups.share_read(con, [str(clustered)], "t", "TIMESTAMP", _days(40)) == 0.0
        assert row_groups.share_read(con, [str(clustered)], "missing", "TIMESTAMP", two_days) is None
    finally:
        con.close()


def test_a_row_group_without_statistics_counts_as_read(tmp_path):
    path = tmp_path / "nulls.parquet"
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT range AS id, CAST(NULL AS TIMESTAMP) AS t FROM range(3000)) TO '{path}' "
            "(FORMAT parquet, ROW_GROUP_SIZE 1000)"
        )
        assert row_groups.share_read(con, [str(path)], "t", "TIMESTAMP", _days(1)) == 1.0
    finally:
        con.close()


MODULE = """
source events {
  table: raw.events
  versioning: cdc(updated_at)
}

model stg {
  from events
  filter v <> 0
  select id, ts, updated_at, v
}

model daily {
  from stg
  let day = cast(ts as date)
  group day
  aggregate n = count(*), total = sum(v)
  partitioned_by: day(day)
}
"""


def test_scattered_days_of_a_clustered_state_are_replaced_by_their_ranges(tmp_path):
    """Ten scattered days of 120 (more runs than MAX_EXACT_RANGES) in a state written in time
    order: its row groups show the ranges skip most rows, so the replaced rows are found by
    ranges; the result equals a full rebuild."""
    project, warehouse = make_module_project(
        tmp_path,
        "events.strata",
        MODULE,
        "CREATE TABLE raw.events (id BIGINT, ts TIMESTAMP, updated_at TIMESTAMP, v INTEGER)",
    )
    # 1.2M rows over 120 days in time order: about 10 days per 122,880-row group.
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT range, TIMESTAMP '2026-01-01' + to_seconds(range * 864 // 100), "
        "TIMESTAMP '2026-01-01' + to_seconds(range * 864 // 100), range % 7 FROM range(1200000)",
    )
    run_project(project, warehouse)
    # One row of `stg` on each of days 0, 2, ..., 18 (ten runs, two row groups) moves to a new day.
    sql(
        warehouse,
        "UPDATE raw.events SET v = v + 1, updated_at = TIMESTAMP '2026-06-01' + to_seconds(id // 1000) "
        "WHERE id IN (SELECT min(id) FROM raw.events WHERE ts < TIMESTAMP '2026-01-20' AND v BETWEEN 1 AND 5 "
        "AND (CAST(ts AS DATE) - DATE '2026-01-01') % 2 = 0 GROUP BY CAST(ts AS DATE))",
    )
    result = run_project(project, warehouse, only_stale=True)
    stg = result.outcome("stg").detail
    assert stg["row_wise"] == "day(updated_at)"
    assert len(stg["partitions"]) == 11  # the ten days the rows left and the day they arrive on
    assert sorted(result.outcome("daily").detail["partitions"]) == [
        (DAY + dt.timedelta(days=n)).isoformat() for n in range(0, 20, 2)
    ]
    con = duckdb.connect(str(warehouse))
    try:
        full_stg = "SELECT id, ts, updated_at, v FROM raw.events WHERE v <> 0"
        assert compare_with_full(con, "stg", full_stg) == {"rows": 0, "groups": 0}
        full_daily = (
            f"SELECT CAST(ts AS DATE) AS day, count(*) AS n, sum(v) AS total FROM ({full_stg}) GROUP BY 1"
        )
        assert compare_with_full(con, "daily", full_daily) == {"rows": 0, "groups": 0}
        # What the new states record of their rows (from the rows they replace) is what they hold.
        reader = HistoryReader(con)
        for model in ("stg", "daily"):
            head = reader.snapshot(reader.pointers(DEFAULT_BRANCH)[model][-1])
            held = content_of(con, exp.table_(f"v_{model}", db="main"))  # the engine's own hash of rows
            assert (head.row_count, int(head.row_hash_sum)) == (held.row_count, int(held.row_hash_sum)), model
    finally:
        con.close()
