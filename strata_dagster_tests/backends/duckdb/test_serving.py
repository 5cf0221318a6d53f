"""Readers are never locked out: they read the serving copy, never the writer's file (issue 19)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import duckdb
import pytest

from strata_dagster.backends.duckdb.serving import (
    GRACE_ENV,
    READER_CATALOG,
    SERVING_STEPS,
    served_view_count,
    serving_dir,
)
from strata_dagster.backends.duckdb.snapshot_files import STORAGE_ENV, STORAGES
from strata_dagster.backends.duckdb.snapshot_files import folder_of as snapshot_folder
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.commands.operations import create_branch, rollback
from strata_dagster.engine.reads.readers import reader_statement_for
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.errors import StrataError
from strata_dagster.faults import KILL_AT_ENV
from strata_dagster_tests.support.engine_support import (
    ADVANCE_UPDATED_AT,
    execute,
    make_module_project,
    make_shop,
    sql,
)
from strata_dagster_tests.support.serving_support import (
    _fingerprint,
    _views,
    served_state,
    unread_snapshot_files,
    warehouse_state,
)

STRATA = [sys.executable, "-m", "strata_dagster.cli.main"]


def strata(*args, env=None):
    environment = {**os.environ, **(env or {})}
    return subprocess.run([*STRATA, *args], env=environment, capture_output=True, text=True)


def moved_region(warehouse):
    con = duckdb.connect()
    con.execute(reader_statement_for(warehouse))
    return con.execute("SELECT region FROM main.v_stg_customers WHERE customer_id = 1").fetchall()


@pytest.fixture
def shop(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=2_000)
    first = run_project(project, warehouse)
    return project, warehouse, first


def test_readers_see_every_branch_as_the_warehouse_publishes_it(shop):
    project, warehouse, _ = shop
    create_branch(warehouse, "dev")
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    run_project(project, warehouse, branch="dev")
    served = served_state(warehouse)
    assert served == warehouse_state(warehouse)
    assert {name.split(".")[0] for name, _, _ in served} == {"main", "dev"}
    # The printed statement, run unchanged in a fresh connection, reads the views by their names.
    printed = strata("connect", str(project), "--warehouse", str(warehouse), "--print")
    assert printed.returncode == 0, printed.stderr
    con = duckdb.connect()
    con.execute(printed.stdout.strip())
    assert con.execute("SELECT region FROM dev.v_stg_customers WHERE customer_id = 1").fetchall() == [
        ("moved",)
    ]
    assert con.execute("SELECT count(*) FROM main.v_daily_revenue").fetchall() == sql(
        warehouse, "SELECT count(*) FROM main.v_daily_revenue"
    )


def test_column_types_survive_the_serving_copy(tmp_path):
    module = "source t { table: raw.t }\nmodel m { from t }\n"
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        module,
        "CREATE TYPE mood AS ENUM ('sad', 'happy')",
        "CREATE TABLE raw.t AS SELECT 170141183460469231731687303715884105727::HUGEINT AS big, "
        "'2026-01-02 03:04:05'::TIMESTAMP_S AS ts, '0101'::BIT AS bits, 'happy'::mood AS feeling, "
        "[1, 2, 3]::INTEGER[3] AS triple, 12345678901234567890123::BIGNUM AS huge",
    )
    run_project(project, warehouse)
    con = duckdb.connect()
    con.execute(reader_statement_for(warehouse))
    expected_types = sql(warehouse, "SELECT column_name, column_type FROM (DESCRIBE main.v_m)")
    assert (
        con.execute("SELECT column_name, column_type FROM (DESCRIBE main.v_m)").fetchall() == expected_types
    )
    assert con.execute("SELECT * FROM main.v_m").fetchall() == sql(warehouse, "SELECT * FROM main.v_m")


def test_connect_names_a_missing_warehouse_and_an_empty_one(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=100)  # sample data, nothing published
    with pytest.raises(StrataError) as empty:
        reader_statement_for(warehouse)
    assert empty.value.code == "E036"
    missing = strata("connect", str(project), "--warehouse", str(tmp_path / "nope.duckdb"), "--print")
    assert "error[E020]" in missing.stderr and "Traceback" not in missing.stderr


def test_connect_without_print_opens_a_prompt_on_the_live_views(shop):
    project, warehouse, _ = shop
    shell = subprocess.run(
        [*STRATA, "connect", str(project), "--warehouse", str(warehouse)],
        input="SELECT count(*) AS n\n  FROM main.v_stg_customers;\nSELECT nope;\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": os.path.dirname(sys.executable)},  # no duckdb CLI: the prompt
    )
    assert shell.returncode == 0, shell.stderr
    assert str(sql(warehouse, "SELECT count(*) FROM main.v_stg_customers")[0][0]) in shell.stdout
    assert "error: Binder Error" in shell.stderr and "Traceback" not in shell.stderr


def test_a_polling_reader_sees_only_whole_published_states(shop, tmp_path):
    """A reader polling every view every 50 ms during a full, an incremental and a partition run,
    a rollback and a gc: no error, and every poll is one of the states published."""
    project, warehouse, first = shop
    published = [served_state(warehouse)]
    out, stop = tmp_path / "polls.jsonl", tmp_path / "stop"
    reader = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strata_dagster_tests.support.serving_support",
            str(warehouse),
            str(out),
            str(stop),
        ]
    )
    try:
        day = str(sql(warehouse, "SELECT min(order_day) FROM main.v_daily_revenue")[0][0])
        execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
        steps = [
            lambda: run_project(project, warehouse, full_refresh=True),
            lambda: execute(
                warehouse,
                f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id = 5",
            ),
            lambda: run_project(project, warehouse),
            lambda: run_project(project, warehouse, partitions=[day]),
            lambda: rollback(warehouse, first.run_id),
            lambda: gc(warehouse, keep=1),
        ]
        for step in steps:
            step()
            published.append(served_state(warehouse))
            time.sleep(0.3)  # let the reader poll this state too
    finally:
        stop.touch()
        reader.wait(timeout=60)
    polls = [json.loads(line) for line in out.read_text().splitlines()]
    errors = [poll["error"] for poll in polls if "error" in poll]
    assert errors == []
    assert len(polls) >= 20
    seen = {json.dumps(poll["state"]) for poll in polls}
    assert seen <= {json.dumps(state) for state in published}
    assert len(seen) >= 3  # the reader did see states change under it
    assert published[-1] == warehouse_state(warehouse)


def test_readers_holding_the_serving_copy_never_hold_up_a_run(shop, tmp_path):
    project, warehouse, _ = shop
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(); c.execute(sys.argv[1]); "
            "c.execute('SELECT count(*) FROM main.v_daily_revenue').fetchall(); print('held', flush=True); time.sleep(60)",
            reader_statement_for(warehouse),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
        result = strata("run", str(project), "--warehouse", str(warehouse), env={"STRATA_LOCK_TIMEOUT": "0"})
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 0, result.stderr
    assert moved_region(warehouse) == [("moved",)]


def test_four_looping_readers_never_make_a_run_wait(shop, tmp_path):
    """Four processes polling every view of every branch through the serving copy, as fast as they
    can, during a full and an incremental run that may not wait a moment for any lock
    (STRATA_LOCK_TIMEOUT=0: a wait would be E021). How long the runs take is the benchmark's
    business (bench/bench_serving.py), not this test's."""
    project, warehouse, _ = shop
    stop = tmp_path / "stop"
    outs = [tmp_path / f"polls-{index}.jsonl" for index in range(4)]
    readers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "strata_dagster_tests.support.serving_support",
                str(warehouse),
                str(out),
                str(stop),
                "0",
            ]
        )
        for out in outs
    ]
    try:
        while not all(out.exists() and out.read_text() for out in outs):
            time.sleep(0.05)  # every reader has polled before the runs start
        no_wait = {"STRATA_LOCK_TIMEOUT": "0"}
        full = strata("run", str(project), "--warehouse", str(warehouse), "--full-refresh", env=no_wait)
        execute(
            warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id = 5"
        )
        incremental = strata("run", str(project), "--warehouse", str(warehouse), env=no_wait)
    finally:
        stop.touch()
        for reader in readers:
            reader.wait(timeout=60)
    assert full.returncode == 0, full.stderr
    assert incremental.returncode == 0, incremental.stderr
    polls = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    assert [poll["error"] for poll in polls if "error" in poll] == []
    assert served_state(warehouse) == warehouse_state(warehouse)


@pytest.mark.parametrize("step", SERVING_STEPS)
def test_a_kill_while_serving_leaves_readers_at_a_whole_state_and_the_next_run_repairs(shop, step):
    project, warehouse, _ = shop
    before = served_state(warehouse)
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    killed = strata("run", str(project), "--warehouse", str(warehouse), env={KILL_AT_ENV: step})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if step == "serving_switched":
        assert served_state(warehouse) == warehouse_state(warehouse)
    else:
        assert served_state(warehouse) == before  # published in the warehouse, not yet to readers
        assert moved_region(warehouse) != [("moved",)]
    again = run_project(project, warehouse, only_stale=True)
    assert again.run_id is None  # nothing to do in the warehouse; the serving copy is repaired
    assert served_state(warehouse) == warehouse_state(warehouse)
    assert moved_region(warehouse) == [("moved",)]


@pytest.mark.parametrize("storage", STORAGES)
def test_gc_removes_what_a_retired_catalog_reads_only_after_the_grace(tmp_path, monkeypatch, storage):
    """A reader attached to a retired catalog keeps reading it through gc for the grace period:
    the snapshot files (or, with table storage, the exports) it reads are removed only after."""
    monkeypatch.setenv(STORAGE_ENV, storage)
    project, warehouse = make_shop(tmp_path, rows=2_000)
    run_project(project, warehouse)
    first = served_state(warehouse)
    reader = duckdb.connect()
    reader.execute(reader_statement_for(warehouse))
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    run_project(project, warehouse)
    kept = gc(warehouse, keep=1)  # drops the first run's replaced snapshots, keeps what readers read
    assert kept.dropped and kept.serving.catalogs_removed == 0
    assert kept.serving.files_removed == kept.serving.snapshot_files_removed == 0
    assert _fingerprint(reader, _views(reader, READER_CATALOG)) == first
    monkeypatch.setenv(GRACE_ENV, "0")
    removed = gc(warehouse, keep=1)
    # The first run's catalog, and the one the first gc wrote for its own history entry.
    assert removed.serving.catalogs_removed == 2
    if storage == "parquet":
        assert removed.serving.snapshot_files_removed >= 1 and removed.reclaimed_bytes > 0
        assert removed.serving.files_removed == 0  # nothing was exported for readers
    else:
        assert removed.serving.files_removed >= 1 and not snapshot_folder(warehouse).exists()
    assert len(list(serving_dir(warehouse).glob("catalog-*.duckdb"))) == 1
    assert served_state(warehouse) == warehouse_state(warehouse)
    assert unread_snapshot_files(warehouse) == set()


def test_a_grace_that_is_not_seconds_is_a_gc_error(shop, monkeypatch):
    project, warehouse, _ = shop
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    run_project(project, warehouse)  # the first run's replaced snapshots are gc's to drop
    monkeypatch.setenv("STRATA_SERVING_GRACE", "soon")
    result = strata("gc", str(project), "--warehouse", str(warehouse), "--keep", "1")
    assert result.returncode == 1
    assert "error[E034]" in result.stderr and "STRATA_SERVING_GRACE" in result.stderr
    assert "Traceback" not in result.stderr
    assert sql(warehouse, "SELECT count(*) FROM strata.dropped_snapshots") == [(0,)]  # nothing done


def test_a_serving_copy_that_cannot_be_written_is_e035_and_the_next_run_repairs_it(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=300)
    serving_dir(warehouse).write_text("not a folder")  # as a full disk or a bad permission would
    failed = strata("run", str(project), "--warehouse", str(warehouse))
    assert failed.returncode == 1
    assert "error[E035]" in failed.stderr and "Traceback" not in failed.stderr
    assert sql(warehouse, "SELECT count(*) FROM strata.entries") == [(1,)]  # the warehouse is published
    serving_dir(warehouse).unlink()
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert served_state(warehouse) == warehouse_state(warehouse)


def test_a_warehouse_restored_from_a_backup_is_served_as_restored(tmp_path):
    """The serving folder outlives a restore of the warehouse file: the next entries reuse the
    abandoned ones' numbers, and readers must see what the restored warehouse publishes."""
    project, warehouse = make_shop(tmp_path, rows=300)
    pristine = shutil.copy(warehouse, tmp_path / "pristine.duckdb")
    run_project(project, warehouse)
    backup = shutil.copy(warehouse, tmp_path / "backup.duckdb")
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    run_project(project, warehouse)
    assert moved_region(warehouse) == [("moved",)]

    shutil.copy(backup, warehouse)  # back to the first entry; the next run is entry 2 again
    execute(warehouse, "UPDATE raw.customers SET region = 'restored' WHERE customer_id = 1")
    run_project(project, warehouse)
    assert moved_region(warehouse) == [("restored",)]
    assert served_state(warehouse) == warehouse_state(warehouse)

    # Back to before any run: a session that publishes nothing (an observation) serves no view.
    shutil.copy(pristine, warehouse)
    observe_sources(project, warehouse)
    assert served_view_count(warehouse) == 0
    run_project(project, warehouse)
    assert served_state(warehouse) == warehouse_state(warehouse)


def view_and_model(tmp_path):
    """A view model `v` over `t` and a table model `m` over another source, `u`."""
    module = (
        "source t { table: raw.t }\nsource u { table: raw.u }\n"
        "model v {\n  from t\n  materialize: view\n}\nmodel m { from u }\n"
    )
    return make_module_project(
        tmp_path,
        "m.strata",
        module,
        "CREATE TABLE raw.t AS SELECT 1 AS id, 'first' AS label",
        "CREATE TABLE raw.u AS SELECT 1 AS id",
    )


def test_a_view_model_of_a_restored_warehouse_is_served_as_its_rows_there(tmp_path):
    """A view model is served as its rows at each entry: after a restore, the entry of the same
    number serves the restored warehouse's rows, not the abandoned lineage's export."""
    project, warehouse = view_and_model(tmp_path)
    run_project(project, warehouse)
    backup = shutil.copy(warehouse, tmp_path / "backup.duckdb")
    # Runs of `m` alone: `v` keeps its snapshot, whose rows (read live) changed with `t`.
    execute(warehouse, "INSERT INTO raw.t VALUES (2, 'abandoned')", "INSERT INTO raw.u VALUES (2)")
    run_project(project, warehouse, models=["m"])
    shutil.copy(backup, warehouse)
    execute(warehouse, "INSERT INTO raw.t VALUES (2, 'restored')", "INSERT INTO raw.u VALUES (2)")
    run_project(project, warehouse, models=["m"])
    con = duckdb.connect()
    con.execute(reader_statement_for(warehouse))
    assert con.execute("SELECT label FROM main.v_v ORDER BY id").fetchall() == [("first",), ("restored",)]
    assert served_state(warehouse) == warehouse_state(warehouse)


def test_a_view_models_rows_are_exported_again_only_when_they_changed(tmp_path):
    """A view model reads its source live, so each publication tells whether its rows changed:
    from the fingerprints its run took of the source, or else from the rows' figures (a scan).
    The same rows serve the earlier export, changed rows (its source changed, even while its
    snapshot stayed) are exported again; readers see what the warehouse's views show."""
    project, warehouse = view_and_model(tmp_path)
    data = serving_dir(warehouse) / "data"

    def exports() -> set[str]:
        return {path.name for path in data.glob("*.parquet")}

    def view_key() -> str:
        """How the live catalog keyed `v`'s rows: by the fingerprints the run read, or by a scan."""
        live = serving_dir(warehouse) / os.readlink(serving_dir(warehouse) / "live.duckdb")
        snapshots = json.loads(live.with_suffix(".json").read_text())["snapshots"]
        return next(key for name, (key, _, _) in snapshots.items() if name.endswith("_v"))

    def served_labels() -> list[tuple[str]]:
        con = duckdb.connect()
        con.execute(reader_statement_for(warehouse))
        return con.execute("SELECT label FROM main.v_v ORDER BY id").fetchall()

    run_project(project, warehouse)
    first = exports()
    assert len(first) == 1 and served_labels() == [("first",)]
    assert view_key().startswith("view:sources:")  # the run fingerprinted `t`: no scan of `v`

    execute(warehouse, "INSERT INTO raw.u VALUES (2)")  # only `m` changes: `v`'s rows do not
    paths = {o.model: o.path for o in run_project(project, warehouse).outcomes}
    assert paths == {"m": "full", "v": "cutoff"}
    assert exports() == first
    assert served_state(warehouse) == warehouse_state(warehouse)

    # `t` changes in a run of `m` alone: `v` keeps its snapshot, whose live rows changed.
    execute(warehouse, "INSERT INTO raw.t VALUES (2, 'second')", "INSERT INTO raw.u VALUES (3)")
    run_project(project, warehouse, models=["m"])
    assert len(exports() - first) == 1 and served_labels() == [("first",), ("second",)]
    assert view_key().startswith("view:rows:")  # `t` was not read by this run: `v`'s rows were
    assert served_state(warehouse) == warehouse_state(warehouse)
