"""States of day-partitioned models record their rows' figures per partition and per the slices
their followers read (engine.builds.state_figures): a partition build reads them instead of scanning its
previous state, and they stay exactly what the live rows give."""

import json

import duckdb

from strata_dagster.engine.builds.state_figures import FIGURES
from strata_dagster.engine.run import run_project
from strata_dagster.state.history import HistoryReader
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.row_wise_support import compare, make_project

DAILY_SLICE = "CAST(__strata_row.order_day AS DATE)"  # how `daily` slices the rows of `stg`


def _live_figures(con: duckdb.DuckDBPyConnection) -> dict[str, object]:
    """What `stg`'s live rows give per day of `updated_at`, and per (that day, day of `order_day`)."""

    def grouped(keys: str) -> list[tuple]:
        return con.execute(
            f"SELECT {keys}, count(*), sum(hash(r)::HUGEINT)::VARCHAR FROM main.v_stg AS r GROUP BY ALL"
        ).fetchall()

    own = {str(day): [count, hash_sum] for day, count, hash_sum in grouped("CAST(updated_at AS DATE)")}
    by: dict[str, dict[str, list]] = {}
    for day, slice_day, count, hash_sum in grouped("CAST(updated_at AS DATE), CAST(order_day AS DATE)"):
        by.setdefault(str(day), {})[str(slice_day)] = [count, hash_sum]
    return {"own": own, "by": {DAILY_SLICE: by}}


def _daily_inputs(con: duckdb.DuckDBPyConnection) -> dict[str, list]:
    """What `daily`'s partitions read of `stg` now: its figures per partition, as a full build records them."""
    rows = con.execute(
        "SELECT CAST(order_day AS DATE), count(*), sum(hash(r)::HUGEINT)::VARCHAR FROM main.v_stg AS r GROUP BY ALL"
    ).fetchall()
    return {str(day): [count, hash_sum] for day, count, hash_sum in rows}


def _recorded_detail(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, object]:
    """The detail the live state of `model` recorded."""
    (view_sql,) = con.execute(
        "SELECT sql FROM duckdb_views() WHERE schema_name = 'main' AND view_name = ?", [f"v_{model}"]
    ).fetchone()
    records = [record for record in HistoryReader(con).snapshots() if record.model == model]
    return dict(next(record.detail for record in reversed(records) if record.table_name in view_sql))


def _recorded(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, object] | None:
    """The figures the live state of `model` recorded."""
    return _recorded_detail(con, model).get(FIGURES)


def _late_updates(warehouse):
    # Order 1 leaves `stg` (cancelled), order 2 gets a new amount, order 3 a new order day: each
    # moves to a new day of `updated_at`; order 4 is deleted.
    execute(
        warehouse,
        "UPDATE raw.orders SET status = 'cancelled', updated_at = TIMESTAMP '2027-03-01 10:00' WHERE order_id = 1",
        "UPDATE raw.orders SET amount = 99, updated_at = TIMESTAMP '2027-03-01 10:01' WHERE order_id = 2",
        "UPDATE raw.orders SET order_ts = TIMESTAMP '2026-02-10 09:00', updated_at = TIMESTAMP '2027-03-02 08:00' "
        "WHERE order_id = 3",
        "DELETE FROM raw.orders WHERE order_id = 4",
    )


def test_recorded_figures_replace_the_scan_and_stay_exact(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    con = duckdb.connect(str(warehouse))
    try:
        assert _recorded(con, "stg") == _live_figures(con)
    finally:
        con.close()
    _late_updates(warehouse)
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("stg").path == "partitions"
    assert result.outcome("stg").detail["replaced_rows_read"] is False
    assert result.outcome("daily").path == "partitions"
    con = duckdb.connect(str(warehouse))
    try:
        assert _recorded(con, "stg") == _live_figures(con)
        # `daily` found its changed days from them, and keeps its own input figures exact.
        assert _recorded_detail(con, "daily")["partition_fingerprints"] == _daily_inputs(con)
        for model in ("stg", "daily"):
            assert compare(con, model) == {"rows": 0, "groups": 0}, model
    finally:
        con.close()


def test_figures_that_do_not_add_up_are_not_trusted(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    con = duckdb.connect(str(warehouse))
    try:
        # A record whose figures say one row fewer than it holds (history edited, or a bug).
        (record,) = [record for record in HistoryReader(con).snapshots() if record.model == "stg"]
        snapshot_id, detail = record.snapshot_id, json.loads(json.dumps(dict(record.detail)))
        day = sorted(detail[FIGURES]["own"])[0]
        detail[FIGURES]["own"][day][0] -= 1
        con.execute(
            "UPDATE strata.snapshots SET detail = ? WHERE snapshot_id = ?", [json.dumps(detail), snapshot_id]
        )
    finally:
        con.close()
    _late_updates(warehouse)
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("stg").detail["replaced_rows_read"] is True
    con = duckdb.connect(str(warehouse))
    try:
        for model in ("stg", "daily"):
            assert compare(con, model) == {"rows": 0, "groups": 0}, model
        assert _recorded(con, "stg") is None  # nothing to keep exact from: none recorded until a full build
    finally:
        con.close()
    run_project(project, warehouse, full_refresh=True)
    con = duckdb.connect(str(warehouse))
    try:
        assert _recorded(con, "stg") == _live_figures(con)
    finally:
        con.close()


def test_a_run_of_the_input_alone_keeps_its_followers_slices(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    _late_updates(warehouse)
    run_project(project, warehouse, models=["stg"], only_stale=True)
    con = duckdb.connect(str(warehouse))
    try:
        assert _recorded(con, "stg") == _live_figures(con)  # `daily`'s slices too, though it did not run
    finally:
        con.close()
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("daily").path == "partitions"
    con = duckdb.connect(str(warehouse))
    try:
        assert compare(con, "daily") == {"rows": 0, "groups": 0}
    finally:
        con.close()
