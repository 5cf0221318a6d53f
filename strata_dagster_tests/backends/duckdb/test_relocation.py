"""A warehouse moved or copied with its snapshot folder (backends.duckdb.relocation): the next write
session points the snapshot views at the files beside it, so a moved warehouse builds and serves,
and a copy neither reads the original's files nor loses its own to its gc."""

import shutil

import duckdb

from strata_dagster.backends.duckdb import serving
from strata_dagster.backends.duckdb.relocation import relocate
from strata_dagster.backends.duckdb.session import DuckDBSession
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import execute, make_shop

MODELS = ("stg_orders", "daily_revenue", "orders_enriched", "order_timeline")


def _rows(warehouse, schema: str = "main") -> dict[str, list]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return {m: sorted(con.execute(f"SELECT * FROM {schema}.v_{m}").fetchall(), key=repr) for m in MODELS}
    finally:
        con.close()


def _files_read(warehouse) -> set[str]:
    """The folders the snapshot views read files from."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute(
            "SELECT regexp_extract(sql, 'read_parquet\\(''(.*)/[^/]*''\\)', 1) FROM duckdb_views() "
            "WHERE schema_name = 'strata_snapshots' AND contains(sql, 'read_parquet(')"
        ).fetchall()
    finally:
        con.close()
    return {row[0] for row in rows}


def _served(warehouse) -> dict[str, list]:
    con = duckdb.connect()
    try:
        con.execute(serving.reader_statement(warehouse))
        return {m: sorted(con.execute(f"SELECT * FROM main.v_{m}").fetchall(), key=repr) for m in MODELS}
    finally:
        con.close()


def _build(tmp_path):
    first = tmp_path / "first"
    first.mkdir()
    project, warehouse = make_shop(first, rows=2_000)
    run_project(project, warehouse)
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1, updated_at = updated_at + INTERVAL 900 DAY WHERE order_id % 97 = 0",
    )
    run_project(project, warehouse, only_stale=True)  # delta segments too
    return project, warehouse


def test_a_moved_warehouse_builds_and_serves_from_the_files_beside_it(tmp_path):
    project, warehouse = _build(tmp_path)
    before = _rows(warehouse)
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "first", moved)
    warehouse = moved / "warehouse.duckdb"
    project = moved / "shop"
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 2, updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 HOUR "
        "WHERE order_id = 7",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("stg_orders").path == "delta"
    assert _files_read(warehouse) == {str(moved / "warehouse.duckdb.snapshots")}
    after = _rows(warehouse)
    assert after["daily_revenue"] != before["daily_revenue"]  # the new change, on the moved state
    assert _served(warehouse) == after


def test_a_copy_reads_its_own_files_and_survives_its_gc_and_the_original_gone(tmp_path):
    project, warehouse = _build(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "first", copy)
    copied = copy / "warehouse.duckdb"
    run_project(copy / "shop", copied, only_stale=True)  # a write session: the views move here
    assert _files_read(copied) == {str(copy / "warehouse.duckdb.snapshots")}
    gc(copied, keep=1)
    shutil.rmtree(tmp_path / "first")
    assert _rows(copied) == _served(copied)
    assert all(_rows(copied).values())


def test_views_whose_files_are_not_beside_the_warehouse_keep_reading_where_they_are(tmp_path):
    """Only the database file copied: there is nothing here to point at, so nothing is rewritten
    and the copy reads the original's files (it would lose nothing to its own gc either)."""
    _, warehouse = _build(tmp_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(warehouse, alone / "warehouse.duckdb")
    con = duckdb.connect(str(alone / "warehouse.duckdb"))
    try:
        assert relocate(DuckDBSession(con), alone / "warehouse.duckdb.snapshots") == 0
    finally:
        con.close()
    assert _rows(alone / "warehouse.duckdb") == _rows(warehouse)
