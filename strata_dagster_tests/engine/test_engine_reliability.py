"""Crashes and concurrency: a SIGKILL at any write step, and two processes on one warehouse."""

import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest

from strata_dagster.engine.commands.replay import replay
from strata_dagster.engine.run import run_project
from strata_dagster.faults import KILL_AT_ENV, WRITE_STEPS
from strata_dagster.state.history import HistoryReader
from strata_dagster_tests.support.engine_support import execute, history_count, make_shop
from strata_dagster_tests.support.serving_support import served_state, unread_snapshot_files, warehouse_state

STRATA = [sys.executable, "-m", "strata_dagster.cli.main"]


def strata(*args, env=None, **kwargs):
    environment = {**os.environ, **(env or {})}
    return subprocess.run([*STRATA, *args], env=environment, capture_output=True, text=True, **kwargs)


def assert_consistent(warehouse):
    """Every live view reads registered snapshots, exactly those its latest publication names."""
    views = execute(
        warehouse, "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal"
    )
    published = dict(
        execute(
            warehouse,
            "SELECT 'v_' || model, snapshot_ids FROM strata.publications WHERE branch = 'main' "
            "QUALIFY row_number() OVER (PARTITION BY model ORDER BY entry DESC) = 1",
        )
    )
    registered = dict(execute(warehouse, "SELECT snapshot_id, table_name FROM strata.snapshots"))
    # A snapshot is a table, or a view (over its Parquet file, or a `materialize: view` model's).
    tables = {
        row[0]
        for row in execute(
            warehouse,
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'strata_snapshots' "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE schema_name = 'strata_snapshots'",
        )
    }
    assert {name for name, _ in views} == set(published)
    for name, sql in views:
        expected = [registered[snapshot_id] for snapshot_id in published[name]]
        assert all(table in tables for table in expected), name
        assert all(f"strata_snapshots.{table}" in sql for table in expected), (name, sql)
        execute(warehouse, f"SELECT count(*) FROM main.{name}")
    # No snapshot in the snapshot schema that the history does not know (no half-written snapshot).
    # Besides the snapshots themselves, a record may carry its keys table and the per-key figures
    # tables of its joined inputs (engine.builds.joined_inputs).
    con = duckdb.connect(str(warehouse), read_only=True)
    try:  # read as the engine reads them: values moved to detail files included
        details = [record.detail for record in HistoryReader(con).snapshots()]
    finally:
        con.close()
    carried = {detail["keys_table"] for detail in details if detail.get("keys_table")}
    carried |= {
        figures["table"] for detail in details for figures in (detail.get("join_figures") or {}).values()
    }
    assert tables <= set(registered.values()) | carried
    orphans = execute(
        warehouse,
        "SELECT count(*) FROM strata.entry_models m ANTI JOIN strata.snapshots s USING (snapshot_id)",
    )
    assert orphans == [(0,)]


@pytest.fixture
def built_shop(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=2_000)
    run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    return project, warehouse


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_kill_at_every_write_step(built_shop, step):
    project, warehouse = built_shop
    entries = history_count(warehouse)
    killed = strata(
        "run", str(project), "--warehouse", str(warehouse), "--only-stale", env={KILL_AT_ENV: step}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert_consistent(warehouse)
    moved = execute(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1")
    if step == "committed":
        assert history_count(warehouse) == entries + 1
        assert moved == [("moved",)]
    else:
        assert history_count(warehouse) == entries
        assert moved != [("moved",)]
    # The next run completes and the result is what the data says.
    again = strata("run", str(project), "--warehouse", str(warehouse), "--only-stale")
    assert again.returncode == 0, again.stderr
    assert_consistent(warehouse)
    assert execute(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1") == [("moved",)]
    latest = execute(warehouse, "SELECT run_id FROM strata.entries ORDER BY entry DESC LIMIT 1")[0][0]
    assert replay(warehouse, latest, execute=True).is_reproduced
    # A file the killed run wrote but never published is garbage: gc removes it, and only it.
    before = served_state(warehouse)
    assert strata("gc", str(project), "--warehouse", str(warehouse), "--keep", "100").returncode == 0
    assert unread_snapshot_files(warehouse) == set()
    assert served_state(warehouse) == before == warehouse_state(warehouse)


@pytest.mark.parametrize("delay", [0.3, 0.6, 0.9, 1.2])
def test_kill_at_a_random_instant(tmp_path, delay):
    project, warehouse = make_shop(tmp_path, rows=60_000)
    process = subprocess.Popen(
        [*STRATA, "run", str(project), "--warehouse", str(warehouse)], stdout=subprocess.DEVNULL
    )
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if history_count_or_zero(warehouse):
        assert_consistent(warehouse)
    again = strata("run", str(project), "--warehouse", str(warehouse), "--only-stale")
    assert again.returncode == 0, again.stderr
    assert_consistent(warehouse)


def history_count_or_zero(warehouse):
    tables = execute(
        warehouse,
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'strata' AND table_name = 'entries'",
    )
    return history_count(warehouse) if tables[0][0] else 0


def test_two_runs_at_once_both_succeed(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=20_000)
    args = [*STRATA, "run", str(project), "--warehouse", str(warehouse)]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = [process.communicate(timeout=300) for process in (first, second)]
    assert first.returncode == 0, results[0][1]
    assert second.returncode == 0, results[1][1]
    assert history_count(warehouse) == 2
    assert_consistent(warehouse)


def test_busy_warehouse_fails_with_a_coded_error(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=500)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(30)",
            str(warehouse),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        result = strata(
            "run", str(project), "--warehouse", str(warehouse), env={"STRATA_LOCK_TIMEOUT": "0.5"}
        )
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 1
    assert "error[E021]" in result.stderr
    assert "Traceback" not in result.stderr


def test_hostile_override_values_cannot_inject_sql(built_shop):
    project, warehouse = built_shop
    hostile = 'x"; DROP TABLE raw.orders; --'
    result = strata("run", str(project), "--warehouse", str(warehouse), "--source", f"orders={hostile}")
    assert result.returncode == 1
    assert "error[E022]" in result.stderr and "Traceback" not in result.stderr
    assert execute(warehouse, "SELECT count(*) FROM raw.orders")[0][0] == 2_000
    # A table whose name needs quoting is read correctly through an override.
    execute(warehouse, 'CREATE TABLE raw."odd name; drop" AS SELECT * FROM raw.customers')
    ok = strata(
        "run",
        str(project),
        "--warehouse",
        str(warehouse),
        "--only-stale",
        "--source",
        "customers=raw.odd name; drop",
    )
    assert ok.returncode == 0, ok.stderr
    assert execute(warehouse, "SELECT overrides FROM strata.entries ORDER BY entry DESC LIMIT 1") == [
        ('{"customers": "raw.odd name; drop"}',)
    ]


def test_cli_errors_never_show_a_traceback(built_shop, tmp_path):
    project, warehouse = built_shop
    cases = [
        ("run", str(project), "--warehouse", str(warehouse), "--models", "nope"),
        ("run", str(project), "--warehouse", str(warehouse), "--source", "orders"),
        ("run", str(project), "--warehouse", str(warehouse), "--source", "nope=raw.orders"),
        ("rollback", str(project), "deadbeefdead", "--warehouse", str(warehouse)),
        ("replay", str(project), "deadbeefdead", "--warehouse", str(warehouse)),
        ("run", str(tmp_path / "no-project"), "--warehouse", str(warehouse)),
        ("branch", "create", str(project), "strata", "--warehouse", str(warehouse)),
    ]
    for args in cases:
        result = strata(*args)
        assert result.returncode != 0, args
        assert "error[E0" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
    folder = strata("run", str(project), "--warehouse", str(tmp_path))  # a folder, not a file (DuckDB)
    assert folder.returncode == 1 and "error[E020]" in folder.stderr and "Traceback" not in folder.stderr
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_text("not a database")
    result = strata("run", str(project), "--warehouse", str(garbage))
    assert result.returncode == 1 and "error[E020]" in result.stderr and "Traceback" not in result.stderr
