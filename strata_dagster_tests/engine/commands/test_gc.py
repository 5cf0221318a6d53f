"""`strata gc`: by count and by age, never what a branch or a kept run needs; `--compact` shrinks the
file, kill-safe at every step.

These tests count the bytes freed inside the warehouse file and copy the file alone for each test,
so they store snapshots as tables (`STRATA_SNAPSHOT_STORAGE=table`): which snapshots gc drops does
not depend on the storage. Snapshots stored as Parquet files are collected in test_snapshot_files.py.
"""

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys

import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.backends.duckdb.compaction import STAGING_SUFFIX
from strata_dagster.backends.duckdb.snapshot_files import STORAGE_ENV
from strata_dagster.cli.main import main
from strata_dagster.engine.commands import operations
from strata_dagster.engine.commands.backfill import backfill
from strata_dagster.engine.commands.gc import gc, parse_age
from strata_dagster.engine.commands.replay import replay
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_GC, StrataError
from strata_dagster.faults import COMPACT_STEPS, KILL_AT_ENV
from strata_dagster_tests.support.engine_support import execute, make_shop

STRATA = [sys.executable, "-m", "strata_dagster.cli.main"]
HISTORY_TABLES = ("entries", "entry_models", "publications", "snapshots")


@pytest.fixture(scope="module", autouse=True)
def table_storage():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_ENV, "table")  # for this process and the CLI processes it starts
        yield


@pytest.fixture(scope="module")
def four_runs(tmp_path_factory, table_storage):
    """A shop warehouse after four runs, a branch made after the second; ids of the runs."""
    root = tmp_path_factory.mktemp("gc")
    project, warehouse = make_shop(root, rows=2_000)
    runs = [run_project(project, warehouse)]
    for region in ("r2", "r3", "r4"):
        if region == "r3":
            operations.create_branch(warehouse, "early")
        execute(
            warehouse,
            f"UPDATE raw.customers SET region = '{region}' WHERE customer_id = 1",
            "UPDATE raw.orders SET amount = amount + 1 WHERE order_id % 3 = 0",
        )
        runs.append(run_project(project, warehouse, only_stale=True))
    return project, warehouse, [result.run_id for result in runs]


@pytest.fixture
def shop(four_runs, tmp_path):
    project, warehouse, run_ids = four_runs
    copy = tmp_path / "warehouse.duckdb"
    shutil.copy(warehouse, copy)
    return project, copy, run_ids


def started_at(warehouse, run_id):
    return execute(warehouse, "SELECT started_at FROM strata.entries WHERE run_id = ?", params=[run_id])[0][0]


def live_state(warehouse):
    """Row-hash multisets of every view of every branch, and of the history tables."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        views = con.execute(
            "SELECT schema_name || '.' || view_name FROM duckdb_views() WHERE NOT internal "
            "AND schema_name IN ('main', 'early') ORDER BY ALL"
        ).fetchall()
        names = [name for (name,) in views] + [f"strata.{name}" for name in HISTORY_TABLES]
        return {
            name: con.execute(f"SELECT hash(r), count(*) FROM {name} AS r GROUP BY 1 ORDER BY 1").fetchall()
            for name in names
        }
    finally:
        con.close()


def test_older_than_keeps_the_runs_younger_than_the_age(shop):
    project, warehouse, (first, _, third, _) = shop
    by_count = warehouse.with_name("by_count.duckdb")
    shutil.copy(warehouse, by_count)
    expected = gc(by_count, keep=2)
    # One hour after the third run, the runs younger than an hour are the third and the fourth.
    now = started_at(warehouse, third) + dt.timedelta(hours=1)
    result = gc(warehouse, older_than=dt.timedelta(hours=1), now=now)
    assert result.kept == 2
    assert set(result.dropped) == set(expected.dropped) and result.dropped
    operations.rollback(warehouse, third)
    with pytest.raises(StrataError) as caught:
        operations.rollback(warehouse, first)
    assert caught.value.code == "E024"


def test_older_than_never_drops_what_a_branch_exposes(shop):
    _, warehouse, _ = shop
    before = live_state(warehouse)
    later = dt.datetime.now() + dt.timedelta(weeks=520)
    result = gc(warehouse, older_than=dt.timedelta(days=30), now=later)
    assert result.kept == 0 and result.dropped
    after = live_state(warehouse)
    # Every view of both branches reads what it read; the history only grew by the gc entry.
    assert {k: v for k, v in after.items() if not k.startswith("strata.")} == {
        k: v for k, v in before.items() if not k.startswith("strata.")
    }


def test_keep_and_older_than_together_keep_what_either_keeps(shop):
    _, warehouse, (_, _, third, _) = shop
    now = started_at(warehouse, third) + dt.timedelta(hours=1)
    result = gc(warehouse, keep=1, older_than=dt.timedelta(hours=1), now=now)
    assert result.kept == 2


def test_cli_prints_what_it_dropped_and_the_bytes_reclaimed(shop):
    project, warehouse, _ = shop
    runner = CliRunner()
    text = runner.invoke(main, ["gc", str(project), "--warehouse", str(warehouse), "--keep", "2"])
    assert text.exit_code == 0, text.output
    dropped = execute(
        warehouse,
        "SELECT snapshot_id, model FROM strata.snapshots WHERE snapshot_id IN "
        "(SELECT unnest(json_extract_string(detail, '$.dropped[*]')) FROM strata.entries "
        "WHERE kind = 'gc')",
    )
    assert dropped
    for snapshot_id, model in dropped:
        assert any(model in line and snapshot_id in line for line in text.output.splitlines())
    snapshots = "1 snapshot" if len(dropped) == 1 else f"{len(dropped)} snapshots"
    assert f"dropped {snapshots}; kept the snapshots of 2 runs; reclaimed" in text.output
    as_json = runner.invoke(
        main, ["gc", str(project), "--warehouse", str(warehouse), "--keep", "1", "--compact", "--json"]
    )
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output)
    assert report["dropped"] and {"snapshot_id", "model", "partition", "table"} <= set(report["dropped"][0])
    assert report["kept_runs"] == 1 and report["compacted"] is True
    assert report["reclaimed_bytes"] == report["file_bytes_before"] - report["file_bytes_after"] > 0
    assert report["file_bytes_after"] == os.path.getsize(warehouse)


def test_gc_reports_bytes_freed_inside_the_file(shop):
    _, warehouse, _ = shop
    result = gc(warehouse, keep=1)
    assert result.dropped and result.reclaimed_bytes > 0 and not result.is_compacted


def test_compact_shrinks_the_file_and_everything_reads_the_same(shop):
    project, warehouse, _ = shop
    gc(warehouse, keep=1)
    before = live_state(warehouse)
    size = os.path.getsize(warehouse)
    result = gc(warehouse, keep=1, compact_file=True)
    assert result.dropped == ()
    assert os.path.getsize(warehouse) < size
    assert result.reclaimed_bytes == size - os.path.getsize(warehouse)
    assert live_state(warehouse) == before
    assert not warehouse.with_name(warehouse.name + STAGING_SUFFIX).exists()
    # The compacted warehouse is a working one: the next run builds on it.
    execute(warehouse, "UPDATE raw.customers SET region = 'r5' WHERE customer_id = 1")
    run_project(project, warehouse, only_stale=True)
    assert execute(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1") == [("r5",)]


@pytest.mark.parametrize("step", COMPACT_STEPS)
def test_a_crash_at_any_compaction_step_leaves_a_complete_warehouse(shop, step):
    project, warehouse, _ = shop
    gc(warehouse, keep=1)
    before = live_state(warehouse)
    args = ["gc", str(project), "--warehouse", str(warehouse), "--keep", "1", "--compact"]
    killed = subprocess.run([*STRATA, *args], env={**os.environ, KILL_AT_ENV: step}, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert live_state(warehouse) == before
    again = subprocess.run([*STRATA, *args], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert live_state(warehouse) == before
    assert not warehouse.with_name(warehouse.name + STAGING_SUFFIX).exists()


@pytest.mark.parametrize("age", ["30", "d", "1.5d", "-1d", "30 days", "2y", ""])
def test_bad_ages_are_coded_errors(age):
    with pytest.raises(StrataError) as caught:
        parse_age(age)
    assert caught.value.code == E_GC


def test_cli_bad_age_or_no_rule_is_a_coded_error(shop):
    project, warehouse, _ = shop
    runner = CliRunner()
    for extra in (["--older-than", "soon"], []):
        result = runner.invoke(main, ["gc", str(project), "--warehouse", str(warehouse), *extra])
        assert result.exit_code == 1
        assert f"error[{E_GC}]" in result.output and "Traceback" not in result.output


def test_ages_read_as_hours_days_and_weeks():
    assert parse_age("12h") == dt.timedelta(hours=12)
    assert parse_age("30d") == dt.timedelta(days=30)
    assert parse_age("2W") == dt.timedelta(weeks=2)


def test_a_kept_backfill_keeps_the_run_it_corrects(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=2_000)
    first = run_project(project, warehouse)
    execute(
        warehouse,
        "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 2",
        "CREATE SCHEMA fixes; CREATE TABLE fixes.customers AS "
        "SELECT * REPLACE (CASE WHEN customer_id = 1 THEN 'fixed' ELSE region END AS region) FROM raw.customers",
    )
    run_project(project, warehouse, only_stale=True)
    backfill(project, warehouse, first.run_id, "customer 1's region", sources=["customers=fixes.customers"])
    result = gc(warehouse, keep=1)
    assert result.kept == 2 and result.dropped
    operations.rollback(warehouse, first.run_id)
    checks = replay(warehouse, first.run_id, execute=True).checks
    assert checks and all(check.status != "snapshot gone" for check in checks)
