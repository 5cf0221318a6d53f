"""Publication to Iceberg: every live model is an Iceberg table that pyiceberg, polars and DuckDB
read as the warehouse's views show it, through builds, deltas, partition rebuilds, rollback and gc."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyiceberg")

from click.testing import CliRunner  # noqa: E402
from pyiceberg.expressions import AlwaysTrue  # noqa: E402
from pyiceberg.transforms import DayTransform, MonthTransform  # noqa: E402

from strata_dagster.backends.duckdb.snapshot_files import folder_of  # noqa: E402
from strata_dagster.backends.iceberg.catalog import folder_of as setting_folder  # noqa: E402
from strata_dagster.backends.iceberg.catalog import setting_for  # noqa: E402
from strata_dagster.backends.iceberg.partition_files import readable_everywhere  # noqa: E402
from strata_dagster.backends.iceberg.publisher import REWRITE_STEP  # noqa: E402
from strata_dagster.backends.opening import open_session  # noqa: E402
from strata_dagster.cli.main import main  # noqa: E402
from strata_dagster.engine.commands.operations import create_branch, promote, rollback  # noqa: E402
from strata_dagster.engine.iceberg_publication import ICEBERG_STEP  # noqa: E402
from strata_dagster.engine.run import run_project  # noqa: E402
from strata_dagster.errors import E_ICEBERG, StrataError  # noqa: E402
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, edit_module, execute, make_shop  # noqa: E402
from strata_dagster_tests.support.iceberg_support import assert_readers_agree, at_snapshots, catalog_of  # noqa: E402


@pytest.fixture
def iceberg_on(monkeypatch):
    monkeypatch.setenv("STRATA_ICEBERG_CATALOG", "sqlite")
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")


def _data_files(table):
    return {task.file.file_path for task in table.scan().plan_files()}


def test_readers_see_the_views_after_builds_deltas_partition_rebuilds_rollback_and_gc(tmp_path, iceberg_on):
    project, warehouse = make_shop(tmp_path, rows=600)
    first = run_project(project, warehouse)
    assert first.iceberg is not None and set(first.iceberg.how.values()) == {"replaced"}
    assert_readers_agree(warehouse)
    _check_tables(warehouse, first)

    execute(
        warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 40 = 0"
    )
    delta = run_project(project, warehouse)
    assert delta.iceberg.how["stg_orders"] == "incremental"  # only the new segment applied
    assert delta.iceberg.how["stg_customers"] == "current"
    # A partition rebuild: the touched days' files drop, the new segment's rows come.
    assert delta.outcome("daily_revenue").path == "partitions"
    assert delta.iceberg.how["daily_revenue"] == "incremental"
    after_delta = assert_readers_agree(warehouse)
    # History records each table's Iceberg snapshot, with the entry whose state it holds.
    assert _recorded(warehouse)["stg_orders"] == (delta.entry, delta.iceberg.snapshots["stg_orders"])

    # Late updates to the last days only: each partitioned table rewrites just those partitions.
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 3, {ADVANCE_UPDATED_AT} "
        "WHERE order_ts >= (SELECT max(order_ts) - INTERVAL 2 DAY FROM raw.orders)",
    )
    recent = run_project(project, warehouse)
    assert recent.iceberg.how["daily_revenue"] == "incremental"
    assert recent.iceberg.how["monthly_revenue"] == "incremental"
    assert_readers_agree(warehouse, every_reader=False)

    undone = rollback(warehouse, first.run_id)
    assert undone.iceberg is not None and undone.iceberg.how["stg_orders"] == "reverted"
    assert undone.iceberg.snapshots["stg_orders"] == first.iceberg.snapshots["stg_orders"]
    assert_readers_agree(warehouse)
    # The consistent read of one run: per table, the snapshot of that run's state.
    printed = CliRunner().invoke(
        main, ["connect", str(project), "--warehouse", str(warehouse), "--iceberg", "--run", delta.run_id]
    )
    assert printed.exit_code == 0, printed.output
    header, *rows = printed.output.splitlines()
    assert header.startswith("# from pyiceberg.catalog import load_catalog; catalog = load_catalog('strata'")
    lines = dict(line.split("\t")[:2] for line in rows)
    assert lines["main.stg_orders"] == str(delta.iceberg.snapshots["stg_orders"])
    # Those snapshots, read later (after more runs and a rollback), are the delta run's state.
    assert (
        at_snapshots(catalog_of(warehouse), {table: int(id_) for table, id_ in lines.items()}) == after_delta
    )

    collected = CliRunner().invoke(main, ["gc", str(project), "--warehouse", str(warehouse), "--keep", "1"])
    assert collected.exit_code == 0, collected.output
    assert re.search(r"iceberg: expired [1-9][0-9]* snapshots", collected.output), collected.output
    assert_readers_agree(warehouse)
    # No data file of a table's own is left that no kept snapshot reads.
    catalog = catalog_of(warehouse)
    for identifier in catalog.list_tables("main"):
        table = catalog.load_table(identifier)
        kept = set(table.inspect.all_data_files().column("file_path").to_pylist())
        own = {path.as_uri() for path in Path(table.location().removeprefix("file://")).rglob("*.parquet")}
        assert own <= {path if path.startswith("file:") else Path(path).as_uri() for path in kept}, identifier
    # After gc every table still reads, and a new build publishes on top of it.
    execute(
        warehouse, f"UPDATE raw.orders SET amount = amount + 2, {ADVANCE_UPDATED_AT} WHERE order_id % 30 = 0"
    )
    ran = CliRunner().invoke(main, ["run", str(project), "--warehouse", str(warehouse)])
    assert ran.exit_code == 0, ran.output
    assert "iceberg: " in ran.output and "brought to their views: " in ran.output
    assert_readers_agree(warehouse, every_reader=False)


def _check_tables(warehouse, result):
    """Schema, partition spec and summary of a full build's tables; unpartitioned ones register
    strata's own files."""
    catalog = catalog_of(warehouse)
    daily = catalog.load_table(("main", "daily_revenue"))
    assert [field.transform for field in daily.spec().fields] == [DayTransform()]
    monthly = catalog.load_table(("main", "monthly_revenue"))
    assert [field.transform for field in monthly.spec().fields] == [MonthTransform()]
    orders = catalog.load_table(("main", "stg_orders"))
    assert orders.spec().fields == ()
    files = _data_files(orders)
    assert files and all(folder_of(warehouse).as_posix() in path for path in files)
    summary = daily.current_snapshot().summary
    assert summary["strata.run-id"] == result.run_id
    assert summary["strata.entry"] == str(result.entry)
    assert summary["strata.build-path"] == "full"
    assert daily.current_snapshot().snapshot_id == result.iceberg.snapshots["daily_revenue"]
    # Not null from the contract; the others optional.
    required = {field.name: field.required for field in daily.schema().fields}
    assert required == {
        "order_day": True,
        "region": True,
        "revenue": False,
        "order_count": True,
        "customer_count": True,
    }


def test_files_written_without_publication_reach_iceberg_in_the_encodings_every_reader_reads(
    tmp_path, monkeypatch
):
    """Publication off, snapshot files use Parquet 2's delta encodings (smaller, faster to write and
    read). Spark's Iceberg runtime read none before 2026, so a warehouse publishing writes version 1
    and registers its files, and rows of a file written before publication was on are written once
    more instead."""
    project, warehouse = make_shop(tmp_path, rows=600)
    first = run_project(project, warehouse)
    assert first.iceberg is None
    before = {
        path: pq.read_metadata(path) for path in folder_of(warehouse).glob("snap_*_stg_orders.*.parquet")
    }
    assert before and not any(readable_everywhere(metadata) for metadata in before.values())

    monkeypatch.setenv("STRATA_ICEBERG_CATALOG", "sqlite")
    execute(
        warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 40 = 0"
    )
    published = run_project(project, warehouse)
    assert published.iceberg is not None and published.iceberg.rows_written > 0
    assert published.iceberg.files_registered > 0  # this run's own files, version 1
    assert_readers_agree(warehouse)
    catalog = catalog_of(warehouse)
    for identifier in catalog.list_tables("main"):
        for path in _data_files(catalog.load_table(identifier)):
            assert readable_everywhere(pq.read_metadata(path.removeprefix("file://"))), (identifier, path)
    # The files stay as they were written: a reader of the warehouse reads them as before.
    assert all(path.exists() for path in before)


def _recorded(warehouse):
    with open_session(warehouse, read_only=True) as session:
        return session.history.iceberg_commits("main")


def test_a_bad_catalog_setting_is_refused_with_its_code(tmp_path, monkeypatch):
    project, warehouse = make_shop(tmp_path, rows=200)
    monkeypatch.setenv("STRATA_ICEBERG_CATALOG", "mysql://nowhere")
    with pytest.raises(StrataError) as raised:
        run_project(project, warehouse)
    assert raised.value.code == E_ICEBERG
    monkeypatch.delenv("STRATA_ICEBERG_CATALOG")
    # Refused before anything was built: the next run builds every model.
    assert not run_project(project, warehouse).is_noop


def test_publication_without_pyiceberg_installed_says_so_with_its_code(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=100)
    script = (
        "import sys; sys.modules['pyiceberg'] = None\n"  # what an interpreter without the extra finds
        "from strata_dagster.engine.run import run_project\n"
        "from strata_dagster.errors import StrataError\n"
        "try:\n"
        f"    run_project({str(project)!r}, {str(warehouse)!r})\n"
        "except StrataError as error:\n"
        "    print(error.code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "STRATA_ICEBERG_CATALOG": "sqlite"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.split() == [E_ICEBERG], done.stderr[-2000:]


def _current(warehouse):
    catalog = catalog_of(warehouse)
    return {
        identifier[-1]: catalog.load_table(identifier).current_snapshot().snapshot_id
        for identifier in catalog.list_tables("main")
    }


def _killed_run(project, warehouse, step):
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from strata_dagster.engine.run import run_project; run_project({str(project)!r}, {str(warehouse)!r})",
        ],
        env={**os.environ, "STRATA_KILL_AT": step},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]


def test_a_kill_after_the_commit_or_between_two_tables_leaves_each_before_or_after_and_the_next_run_completes(
    tmp_path, iceberg_on
):
    project, warehouse = make_shop(tmp_path, rows=500)
    run_project(project, warehouse)
    for step, tables_moved in (("committed", 0), (ICEBERG_STEP, 1)):
        before = _current(warehouse)
        execute(
            warehouse,
            f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 20 = 0",
        )
        _killed_run(project, warehouse, step)
        after_kill = _current(warehouse)
        # The warehouse committed; the tables the kill reached are at the run's state, the others
        # at the previous one.
        assert len([model for model in before if after_kill[model] != before[model]]) == tables_moved
        again = run_project(project, warehouse, only_stale=True)  # nothing to build: tables catch up
        assert again.is_noop and again.iceberg is not None
        assert_readers_agree(warehouse, every_reader=False)
        # Every table's current snapshot is in the history, also one the killed run committed.
        assert {model: ids[1] for model, ids in _recorded(warehouse).items()} == again.iceberg.snapshots


def _unreferenced(warehouse):
    """Per table, the Parquet files in its own folder that no snapshot of it references."""
    catalog = catalog_of(warehouse)
    found = {}
    for identifier in catalog.list_tables("main"):
        table = catalog.load_table(identifier)
        kept = {
            Path(path.removeprefix("file://"))
            for path in table.inspect.all_data_files().column("file_path").to_pylist()
        }
        own = set(Path(table.location().removeprefix("file://")).rglob("*.parquet"))
        if own - kept:
            found[identifier[-1]] = own - kept
    return found


def test_a_kill_after_an_upsert_rewrote_files_before_its_commit_leaves_the_table_before_and_gc_removes_them(
    tmp_path, iceberg_on
):
    project, warehouse = make_shop(tmp_path, rows=500)
    run_project(project, warehouse)
    before = _current(warehouse)
    execute(
        warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 20 = 0"
    )
    _killed_run(project, warehouse, REWRITE_STEP)
    # The rewritten files are written, and no snapshot names them: the table is as it was.
    orphans = _unreferenced(warehouse)
    assert len(orphans) == 1, orphans
    (model, files), after_kill = next(iter(orphans.items())), _current(warehouse)
    assert after_kill[model] == before[model]
    again = run_project(project, warehouse, only_stale=True)  # nothing to build: tables catch up
    assert again.is_noop and again.iceberg.how[model] == "incremental"
    assert_readers_agree(warehouse, every_reader=False)
    collected = CliRunner().invoke(main, ["gc", str(project), "--warehouse", str(warehouse), "--keep", "1"])
    assert collected.exit_code == 0, collected.output
    assert not any(path.exists() for path in files)
    assert_readers_agree(warehouse, every_reader=False)


def test_a_branch_gets_tables_laid_out_like_main_and_a_promotion_brings_them_to_main(tmp_path, iceberg_on):
    project, warehouse = make_shop(tmp_path, rows=400)
    run_project(project, warehouse)
    create_branch(warehouse, "dev")
    dev = catalog_of(warehouse).load_table(("dev", "daily_revenue"))
    assert [field.transform for field in dev.spec().fields] == [DayTransform()]
    assert dev.schema().find_field("order_day").required
    assert_readers_agree(warehouse, "dev")
    # A model's columns change on the branch: its table there is made anew with them.
    module = project / "staging.strata"
    edit_module(
        module,
        "is_business = segment <> 'consumer'",
        "is_business = segment <> 'consumer', extra_flag = true",
    )
    edit_module(module, "    is_business: BOOLEAN\n", "    is_business: BOOLEAN,\n    extra_flag: BOOLEAN\n")
    execute(
        warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 25 = 0"
    )
    run_project(project, warehouse, branch="dev")
    assert "extra_flag" in catalog_of(warehouse).load_table(("dev", "stg_customers")).schema().column_names
    assert_readers_agree(warehouse, "dev", every_reader=False)
    promote(warehouse, "dev", "main")
    assert_readers_agree(warehouse, "main", every_reader=False)


def test_catalog_settings_name_the_embedded_sqlite_postgresql_and_rest_catalogs(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    embedded = setting_for(warehouse, "sqlite")
    assert (embedded.kind, embedded.uri) == (
        "sql",
        f"sqlite:///{tmp_path / 'w.duckdb.iceberg' / 'catalog.db'}",
    )
    assert setting_for(warehouse, "postgresql+psycopg2://u:p@127.0.0.1:9/db").kind == "sql"
    assert setting_for(warehouse, "http://127.0.0.1:9/catalog").kind == "rest"
    assert setting_for(warehouse, "off") is None and setting_for(warehouse, "") is None


def test_a_catalog_that_cannot_be_reached_is_refused_and_the_run_stands(tmp_path, monkeypatch):
    project, warehouse = make_shop(tmp_path, rows=100)
    for uri in ("postgresql+psycopg2://u:p@127.0.0.1:9/db", "http://127.0.0.1:9/catalog"):
        monkeypatch.setenv("STRATA_ICEBERG_CATALOG", uri)
        with pytest.raises(StrataError) as raised:
            run_project(project, warehouse)
        assert raised.value.code == E_ICEBERG, uri
    monkeypatch.delenv("STRATA_ICEBERG_CATALOG")
    # The warehouse committed the run: nothing is left to build.
    assert run_project(project, warehouse, only_stale=True).is_noop


def _no_change_run_opens_pyiceberg(project, warehouse) -> bool:
    """A no-change run in a fresh process: whether it imported pyiceberg (looked at the catalog)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from strata_dagster.engine.run import run_project; "
            f"result = run_project({str(project)!r}, {str(warehouse)!r}, only_stale=True); "
            "assert result.is_noop and set(result.iceberg.how.values()) == {'current'}, result.iceberg; "
            "print('pyiceberg' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1] == "True"


def test_a_run_with_nothing_to_do_looks_at_the_catalog_only_when_something_changed_it(
    tmp_path, iceberg_on, monkeypatch
):
    """After a publication that left every table current, a no-change run neither imports pyiceberg
    nor opens the catalog, unless the embedded catalog's file changed since: a table changed or
    dropped outside strata, or the catalog removed, is then brought back to the views."""
    project, warehouse = make_shop(tmp_path, rows=300)
    run_project(project, warehouse)
    assert not _no_change_run_opens_pyiceberg(project, warehouse)
    catalog = catalog_of(warehouse)
    catalog.load_table(("main", "stg_orders")).delete(AlwaysTrue())  # a writer other than strata
    catalog.drop_table(("main", "daily_revenue"))
    repaired = run_project(project, warehouse, only_stale=True)
    assert repaired.is_noop and repaired.iceberg is not None
    assert {repaired.iceberg.how["stg_orders"], repaired.iceberg.how["daily_revenue"]} <= {
        "replaced",
        "reverted",
    }
    assert_readers_agree(warehouse, every_reader=False)
    assert not _no_change_run_opens_pyiceberg(project, warehouse)
    # The embedded catalog and its tables removed (a process that opened it reads the removed file
    # until it ends): the next command's run makes every table again.
    shutil.rmtree(setting_folder(warehouse))
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"from strata_dagster.engine.run import run_project; run_project({str(project)!r}, {str(warehouse)!r}, only_stale=True)",
        ],
        check=True,
        timeout=300,
    )
    assert not _no_change_run_opens_pyiceberg(project, warehouse)
    assert_readers_agree(warehouse, every_reader=False)
    # Another catalog named: its tables are made, whatever the first one had.
    other = tmp_path / "other.db"
    monkeypatch.setenv("STRATA_ICEBERG_CATALOG", f"sqlite:///{other}")
    moved = run_project(project, warehouse, only_stale=True)
    assert moved.iceberg is not None and set(moved.iceberg.how.values()) == {"replaced"}
