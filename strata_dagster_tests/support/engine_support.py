"""Shared set-up for engine tests: a copy of the shop example with sample data in tmp_path."""

import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.engine.run import RunResult, run_project
from strata_dagster_tests.support.paths import REPO

SHOP = REPO / "examples" / "shop"
UNPARTITIONED_MODELS = (
    "stg_orders",
    "stg_customers",
    "order_status_log",
    "first_seen_orders",
    "orders_enriched",
    "order_tags",
    "order_timeline",
)
SHOP_MODELS = frozenset({*UNPARTITIONED_MODELS, "daily_revenue", "monthly_revenue"})
# What a writer of a `versioning: cdc(updated_at)` source does with every change: advance the
# change column (an UPDATE's SET item). An edit without it is invisible by the cdc contract.
ADVANCE_UPDATED_AT = "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND"
# The figures of engine.commands.verify that count rows and row-hash groups (zero when equal).
VERIFY_COUNTS = (
    "row_delta",
    "hash_groups_only_in_full",
    "hash_groups_only_in_incremental",
    "hash_groups_with_count_mismatch",
    "rows_in_mismatched_hash_groups",
)


def make_shop(tmp_path: Path, rows: int = 3_000) -> tuple[Path, Path]:
    project = tmp_path / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "README.md"))
    warehouse = tmp_path / "warehouse.duckdb"
    write_sample_data(warehouse, rows)
    return project, warehouse


def execute(warehouse: Path, *statements: str, params=None) -> list:
    """Statements as an upstream writer runs them: while a Dagster process (a sensor's tick, a
    run) holds the warehouse's lock, it waits, as such a writer would, for up to a minute."""
    deadline = time.monotonic() + 60
    while True:
        try:
            con = duckdb.connect(str(warehouse))
            break
        except duckdb.IOException as error:
            if "lock" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    try:
        result = []
        for statement in statements:
            result = con.execute(statement, params or []).fetchall()
        return result
    finally:
        con.close()


def edit_module(module: Path, old: str, new: str) -> None:
    """Replace `old` by `new` in a module's text; `old` must be there (an edit that changes
    nothing would leave a test asserting about the unedited project)."""
    text = module.read_text()
    assert old in text, f"`{old}` is not in {module.name}"
    module.write_text(text.replace(old, new))


def sql(warehouse: Path, statement: str, params=None) -> list:
    """The rows of one statement."""
    return execute(warehouse, statement, params=params)


def make_module_project(root: Path, file_name: str, module: str, *tables: str) -> tuple[Path, Path]:
    """A project of one module (root/project/`file_name`) and a warehouse (root/w.duckdb) with a raw
    schema and the `tables` statements run in it."""
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / file_name).write_text(module)
    warehouse = root / "w.duckdb"
    execute(warehouse, "CREATE SCHEMA IF NOT EXISTS raw", *tables)
    return project, warehouse


ORDERS_OF_TEN = "CREATE TABLE raw.orders AS SELECT range AS id, range * 3 AS amount FROM range(10)"


def built_with_caches(root: Path, module: str) -> tuple[Path, Path, Path]:
    """A one-module project over ten orders, built once: its project, warehouse, and the folder
    beside the warehouse where the parsed modules and the compiled project are kept."""
    from strata_dagster.engine.run import run_project
    from strata_dagster.language import parse_cache

    project, warehouse = make_module_project(root, "m.strata", module, ORDERS_OF_TEN)
    run_project(project, warehouse)
    return project, warehouse, parse_cache.cache_dir_of(warehouse)


def view_tables(warehouse: Path, schema: str = "main") -> dict[str, str]:
    """view name -> the SQL DuckDB stores for it."""
    rows = execute(
        warehouse,
        "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = ? AND NOT internal ORDER BY 1",
        params=[schema],
    )
    return dict(rows)


# Every snapshot relation: a table, or a view (over its Parquet file, backends/duckdb/snapshot_files.py,
# or a `materialize: view` model's own view).
SNAPSHOT_RELATIONS = (
    "(SELECT table_name AS name, 'table' AS kind FROM duckdb_tables() WHERE schema_name = 'strata_snapshots' "
    "UNION ALL SELECT view_name, CASE WHEN contains(sql, 'read_parquet(') THEN 'file' ELSE 'view' END "
    "FROM duckdb_views() WHERE schema_name = 'strata_snapshots')"
)


def snapshot_relations(warehouse: Path, kinds: tuple[str, ...] = ("table", "file", "view")) -> list[str]:
    """Names of the snapshot relations of the given kinds ('table', 'file', 'view'), sorted."""
    rows = execute(warehouse, f"SELECT name, kind FROM {SNAPSHOT_RELATIONS} ORDER BY 1")
    return [name for name, kind in rows if kind in kinds]


def history_count(warehouse: Path) -> int:
    return execute(warehouse, "SELECT count(*) FROM strata.entries")[0][0]


def rows_as_text(relation: str) -> str:
    """SQL for the multiset of a relation's rows, each as its text: DuckDB's `hash(r)` cannot tell a
    HUGEINT -1 from 0 (strata_dagster.backends.sql.row_hash), which a `sum` column holds."""
    return f"SELECT CAST(r AS VARCHAR), count(*) FROM {relation} AS r GROUP BY 1 ORDER BY 1"


def row_multiset(warehouse: Path, relation: str) -> list:
    """The multiset of a relation's rows (relation names here are test constants)."""
    return execute(warehouse, rows_as_text(relation))


def replay_history(
    project: Path,
    warehouse: Path,
    history: Iterable[Any],
    apply_step: Callable[[duckdb.DuckDBPyConnection, Any, int], None],
    check: Callable[[duckdb.DuckDBPyConnection, Any, RunResult], None],
    after_check: Callable[[], None] | None = None,
    **run_options: Any,
) -> None:
    """Build `project` fully, then for each step of `history`: apply it to the sources (with its
    clock, 1, 2, ...), build what is stale, and `check(con, step, result)` the live models against
    full rebuilds, then `after_check()` with no connection open. `run_options` go to every run (e.g. `models`)."""
    run_project(project, warehouse, **run_options)
    for clock, step in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        try:
            apply_step(con, step, clock)
        finally:
            con.close()
        result = run_project(project, warehouse, only_stale=True, **run_options)
        con = duckdb.connect(str(warehouse))
        try:
            check(con, step, result)
        finally:
            con.close()
        if after_check is not None:
            after_check()
