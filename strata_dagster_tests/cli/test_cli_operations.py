"""The command line as an operator meets it: why a build took its path, commands that must not
create a warehouse, hostile names and values, Ctrl-C, and what a run says it published."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from strata_dagster.backends.duckdb.connection import LOCK_TIMEOUT_ENV, connect, lock_timeout
from strata_dagster.cli.main import main
from strata_dagster.engine.commands.backfill import as_backfill_error
from strata_dagster.engine.reads.explain import partition_ranges
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.engine.test_engine_reliability import STRATA, assert_consistent, strata
from strata_dagster_tests.support.engine_support import (
    ADVANCE_UPDATED_AT,
    execute,
    history_count,
    make_shop,
    view_tables,
)


def cli(*args, env=None):
    return CliRunner().invoke(main, [str(arg) for arg in args], env=env)


def assert_coded(result, code):
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code == 1, output
    assert f"error[{code}]" in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


@pytest.fixture
def shop(tmp_path):
    return make_shop(tmp_path, rows=2_000)


@pytest.fixture
def built(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    return project, warehouse


# -- 16.7 history and replay say why ------------------------------------------------------------


def test_history_and_replay_say_why_a_delta_was_not_trusted(built):
    project, warehouse = built
    # An order stamped below the watermark (a late writer): the upsert cannot trust a delta.
    execute(
        warehouse,
        "INSERT INTO raw.orders SELECT * REPLACE (order_id + 1000000 AS order_id) FROM raw.orders "
        "WHERE order_id = 7",
    )
    late = run_project(project, warehouse, only_stale=True)
    execute(warehouse, f"UPDATE raw.orders SET status = 'x', {ADVANCE_UPDATED_AT} WHERE order_id IN (5, 6)")
    delta = run_project(project, warehouse, only_stale=True)
    assert late.outcome("stg_orders").path == "full"
    assert delta.outcome("stg_orders").path == "delta"

    text = cli("history", project, "--warehouse", warehouse)
    assert text.exit_code == 0, text.output
    lines = {line.split()[0]: line for line in text.output.splitlines() if line.startswith("  ")}
    assert f"#{late.entry} run {late.run_id[:12]}:" in text.output
    late_block = text.output.split(f"#{late.entry} run")[1].split(f"#{delta.entry} run")[0]
    assert "stg_orders" in late_block and "1 row(s) appeared at or below the watermark" in late_block
    assert "full: first build" in text.output
    assert "stg_orders" in lines and "delta trusted; window (" in lines["stg_orders"]
    assert re.search(r"rows: \d+ read, \d+ merged, \d+ replaced$", lines["stg_orders"])
    assert "daily_revenue" in lines and "of 365 partitions rebuilt: " in lines["daily_revenue"]

    as_json = cli("history", project, "--warehouse", warehouse, "--json")
    entries = json.loads(as_json.output)
    builds = {build["model"]: build for build in entries[-1]["builds"]}
    assert builds["stg_orders"]["path"] == "delta"
    assert builds["stg_orders"]["window"]["low"] < builds["stg_orders"]["window"]["high"]
    assert builds["stg_orders"]["window"]["lateness"] == "10 minutes"
    # The two updated orders, and whatever else `lateness` re-reads.
    assert builds["stg_orders"]["rows_read"] >= builds["stg_orders"]["rows_merged"] >= 2
    assert builds["monthly_revenue"]["path"] == "partitions"
    assert builds["monthly_revenue"]["partitions_total"] == 12
    assert all(len(label) == 7 for label in builds["monthly_revenue"]["partition_ranges"])  # months
    late_builds = {build["model"]: build for build in entries[-2]["builds"]}
    assert late_builds["stg_orders"]["path"] == "full"
    assert "appeared at or below the watermark" in late_builds["stg_orders"]["reason"]
    assert late_builds["stg_orders"]["window"] is None

    replayed = cli("replay", project, late.run_id, "--warehouse", warehouse)
    assert replayed.exit_code == 0, replayed.output
    assert "how and why each model was built:" in replayed.output
    assert "1 row(s) appeared at or below the watermark" in replayed.output


def test_partition_ranges_fold_consecutive_days_and_months():
    days = ["2025-02-10", "2025-01-04", "2025-01-03", "2025-01-05", "2024-12-31", "2025-01-01"]
    assert partition_ranges(days, "day") == ("2024-12-31..2025-01-01", "2025-01-03..2025-01-05", "2025-02-10")
    months = ["2025-01-01", "2024-12-01", "2025-03-01"]
    assert partition_ranges(months, "month") == ("2024-12..2025-01", "2025-03")
    assert partition_ranges(["b", "a"], None) == ("a", "b")  # a plain column: listed, not folded
    assert partition_ranges(["9999-12-31"], "day") == ("9999-12-31",)


# -- 16.8 commands that only read or repoint never create a warehouse ---------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "{project}"),
        ("rollback", "{project}", "deadbeefdead"),
        ("replay", "{project}", "deadbeefdead"),
        ("replay", "{project}", "deadbeefdead", "--execute"),
        ("history", "{project}"),
        ("history", "{project}", "--json"),
        ("branch", "create", "{project}", "dev"),
        ("promote", "{project}", "dev"),
        ("gc", "{project}", "--keep", "1"),
    ],
)
def test_commands_on_a_missing_warehouse_fail_and_create_nothing(shop, tmp_path, args):
    project, _ = shop
    missing = tmp_path / "typo" / "warehuose.duckdb"
    result = cli(*(arg.format(project=project) for arg in args), "--warehouse", missing)
    assert_coded(result, "E020")
    assert "does not exist" in result.output
    assert not missing.exists() and not missing.parent.exists()


def test_check_and_compile_on_a_missing_warehouse_create_nothing(shop, tmp_path):
    project, _ = shop
    missing = tmp_path / "warehuose.duckdb"
    for command in ("check", "compile"):
        result = cli(command, project, "--warehouse", missing)
        assert result.exit_code == 0, result.output
    assert not missing.exists()


def test_history_and_replay_of_a_warehouse_without_runs_only_read_it(shop):
    project, warehouse = shop  # sample data, no run yet
    listed = cli("history", project, "--warehouse", warehouse, "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == []
    assert_coded(cli("replay", project, "deadbeefdead", "--warehouse", warehouse), "E023")
    assert execute(warehouse, "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'strata'") == [(0,)]


# -- 16.9 small things --------------------------------------------------------------------------


def test_a_wrapped_pin_error_says_nothing_was_published_once():
    pin = StrataError("E030", "duplicate keys", hint="fix the data or the model; nothing was published")
    assert as_backfill_error(pin).render().count("nothing was published") == 1
    bare = StrataError("E032", "DuckDB rejected model `x`")
    assert as_backfill_error(bare).hint == "nothing was published"
    typo = StrataError("E025", "no model named `x`", hint="did you mean `y`?")
    wrapped = as_backfill_error(typo)  # a user's mistake too: E085, its own code in the message
    assert (wrapped.code, wrapped.message) == ("E085", "backfill cannot start (E025): no model named `x`")
    assert wrapped.hint == "did you mean `y`?; nothing was published"
    reason = StrataError("E085", "a backfill needs a reason")
    assert as_backfill_error(reason) is reason


# -- 16.10 hostile names and values -------------------------------------------------------------


def test_a_branch_named_like_the_warehouse_file_is_refused(built):
    project, warehouse = built
    assert warehouse.stem == "warehouse"
    for args in (("branch", "create", project, "warehouse"), ("branch", "create", project, "WareHouse")):
        assert_coded(cli(*args, "--warehouse", warehouse), "E026")
    assert_coded(cli("run", project, "--warehouse", warehouse, "--branch", "warehouse"), "E026")
    assert set(execute(warehouse, "SELECT DISTINCT branch FROM strata.publications")) == {("main",)}


def test_branch_names_that_differ_only_in_case_are_refused(built):
    project, warehouse = built
    live = view_tables(warehouse)
    entries = history_count(warehouse)
    assert_coded(cli("run", project, "--warehouse", warehouse, "--branch", "MAIN"), "E026")
    assert cli("branch", "create", project, "dev", "--warehouse", warehouse).exit_code == 0
    assert_coded(cli("branch", "create", project, "DEV", "--warehouse", warehouse), "E026")
    assert_coded(cli("promote", project, "dev", "--to", "Main", "--warehouse", warehouse), "E026")
    assert view_tables(warehouse) == live
    assert history_count(warehouse) == entries + 1  # the branch `dev`, nothing else
    assert set(execute(warehouse, "SELECT DISTINCT branch FROM strata.publications")) == {("main",), ("dev",)}


@pytest.mark.parametrize("value", ["9999-12", "9999-12-31", "0000-01"])
def test_verify_partitions_at_the_end_of_the_calendar_are_a_coded_error(built, value):
    project, warehouse = built
    assert_coded(cli("verify", project, "--warehouse", warehouse, "--partitions", value), "E040")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "soon", ""])
def test_a_lock_timeout_that_is_no_finite_duration_is_a_coded_error(built, monkeypatch, value):
    project, warehouse = built
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, value)
    with pytest.raises(StrataError) as caught:
        lock_timeout()
    assert caught.value.code == "E020"
    assert_coded(cli("history", project, "--warehouse", warehouse, env={LOCK_TIMEOUT_ENV: value}), "E020")


def test_a_lock_timeout_of_seconds_is_read(monkeypatch):
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "2.5")
    assert lock_timeout() == 2.5
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0")
    assert lock_timeout() == 0
    assert not math.isnan(lock_timeout())


def test_sample_data_refuses_what_it_cannot_write_with_a_code(tmp_path):
    from strata_dagster.backends.duckdb.sample_data import MAX_ROWS

    project = tmp_path / "p"
    project.mkdir()
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_text("not a database")
    assert_coded(cli("sample-data", project, "--warehouse", garbage, "--rows", 10), "E020")
    assert garbage.read_text() == "not a database"
    for name in ("raw.duckdb", "RAW.duckdb", "strata.duckdb", "strata_snapshots.duckdb"):
        assert_coded(cli("sample-data", project, "--warehouse", tmp_path / name, "--rows", 10), "E020")
        assert not (tmp_path / name).exists()
    too_many = cli("sample-data", project, "--warehouse", tmp_path / "w.duckdb", "--rows", MAX_ROWS + 1)
    assert too_many.exit_code == 2 and "--rows" in too_many.output
    assert not (tmp_path / "w.duckdb").exists()
    ok = cli("sample-data", project, "--warehouse", tmp_path / "w.duckdb", "--rows", 10)
    assert ok.exit_code == 0, ok.output


def test_sample_data_waits_for_a_locked_warehouse_then_fails_with_a_code(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    execute(warehouse, "CREATE TABLE t AS SELECT 1 AS x")
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
        started = time.monotonic()
        result = strata(
            "sample-data", str(tmp_path), "--warehouse", str(warehouse), env={LOCK_TIMEOUT_ENV: "0.5"}
        )
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 1 and "error[E021]" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert waited >= 0.5


# -- 16.10 Ctrl-C and what a run says it published ----------------------------------------------


def test_ctrl_c_during_a_run_publishes_nothing_and_exits_130(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=300_000)
    run_project(project, warehouse)
    views, entries = view_tables(warehouse), history_count(warehouse)
    process = subprocess.Popen(
        [*STRATA, "run", str(project), "--warehouse", str(warehouse), "--full-refresh"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().startswith("strata run on branch main")
    process.stdout.readline()  # the first model is built: the run is well under way
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, (out, err)
    assert "interrupted: nothing was published" in err
    assert "Traceback" not in err and "published" not in out.replace("to publish", "")
    assert (view_tables(warehouse), history_count(warehouse)) == (views, entries)
    assert_consistent(warehouse)
    again = strata("run", str(project), "--warehouse", str(warehouse), "--only-stale")
    assert again.returncode == 0, again.stderr


def test_progress_lines_never_say_published_before_the_commit(built):
    project, warehouse = built
    execute(warehouse, f"UPDATE raw.orders SET status = 'x', {ADVANCE_UPDATED_AT} WHERE order_id = 5")
    # Models over orders build first, then stg_customers fails its `unique: [customer_id]` pin.
    execute(warehouse, "INSERT INTO raw.customers SELECT * FROM raw.customers WHERE customer_id = 3")
    failed = cli("run", project, "--warehouse", warehouse, "--only-stale")
    assert_coded(failed, "E030")
    assert "to publish" in failed.output  # built before the pin failed, never published
    assert "published" not in failed.output.replace("nothing was published", "")
    execute(
        warehouse,
        "DELETE FROM raw.customers WHERE rowid = (SELECT max(rowid) FROM raw.customers WHERE customer_id = 3)",
    )
    ok = cli("run", project, "--warehouse", warehouse, "--only-stale")
    assert ok.exit_code == 0, ok.output
    summary = ok.output.strip().splitlines()[-1]
    assert "published: " in summary and "stg_orders" in summary and "order_status_log" in summary


def test_ctrl_c_inside_a_duckdb_query_is_a_keyboard_interrupt(tmp_path):
    """DuckDB reports Ctrl-C during a query as RuntimeError('Query interrupted'), which no
    `except duckdb.Error` sees: the connection turns it back into the user's interrupt."""
    interrupter = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        with connect(tmp_path / "w.duckdb") as con:
            interrupter.start()
            con.execute("SELECT count(*) FROM range(150000000) AS t(x) WHERE hash(x) % 7 = 3").fetchall()
    interrupter.join()


def _without_order_timeline(project):
    """The shop with `order_timeline` (and its unit test) deleted, as a user removes a model."""
    for name, head in (("marts.strata", "model order_timeline {"), ("tests.strata", "test order_timeline ")):
        path = project / name
        text = path.read_text()
        start = text.index(head)
        path.write_text(text[:start] + text[text.index("\n}\n", start) + 3 :])


def test_a_removed_models_live_view_is_a_warning_until_strata_retire_drops_it(built):
    project, warehouse = built
    _without_order_timeline(project)
    for command in (("plan", project, "--only-stale"), ("run", project, "--only-stale")):
        result = cli(*command, "--warehouse", warehouse)
        assert result.exit_code == 0, result.output
        assert "warning[W004]: live view `main.v_order_timeline` of a model no longer in the project" in (
            result.stderr
        )
        assert "`strata retire PROJECT` drops it" in result.stderr
    retired = cli("retire", project, "--warehouse", warehouse)
    assert retired.exit_code == 0, retired.output
    assert "order_timeline" in retired.output and "(view dropped)" in retired.output
    assert re.search(
        r"retired on branch main \(run [0-9a-f]{12}\): 1 view dropped \(entry \d+\)", retired.output
    )
    assert "v_order_timeline" not in view_tables(warehouse)
    again = cli("run", project, "--only-stale", "--warehouse", warehouse)
    assert again.exit_code == 0 and "W004" not in again.stderr
    nothing = cli("retire", project, "--warehouse", warehouse)
    assert "nothing to do" in nothing.output
    history = json.loads(cli("history", project, "--warehouse", warehouse, "--json").output)
    entries = history if isinstance(history, list) else history["entries"]
    assert [entry["kind"] for entry in entries][-1] == "retire"


def test_a_deleted_branch_loses_its_views_and_comes_back_by_rollback(built):
    project, warehouse = built
    created = cli("branch", "create", project, "dev", "--warehouse", warehouse)
    assert created.exit_code == 0, created.output
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    on_dev = cli("run", project, "--branch", "dev", "--only-stale", "--warehouse", warehouse)
    assert on_dev.exit_code == 0, on_dev.output
    dev_run = re.search(r"run ([0-9a-f]{12})", on_dev.output).group(1)
    dev_views = view_tables(warehouse, "dev")
    deleted = cli("branch", "delete", project, "dev", "--warehouse", warehouse)
    assert deleted.exit_code == 0, deleted.output
    assert f"{len(dev_views)} views dropped" in deleted.output
    assert view_tables(warehouse, "dev") == {}
    assert view_tables(warehouse, "main")  # main untouched
    assert_coded(cli("branch", "delete", project, "dev", "--warehouse", warehouse), "E026")
    assert_coded(cli("branch", "delete", project, "main", "--warehouse", warehouse), "E026")
    history = json.loads(cli("history", project, "--warehouse", warehouse, "--json").output)
    entries = history if isinstance(history, list) else history["entries"]
    assert (entries[-1]["kind"], entries[-1]["branch"]) == ("branch_delete", "dev")
    back = cli("rollback", project, dev_run, "--warehouse", warehouse)
    assert back.exit_code == 0, back.output
    assert view_tables(warehouse, "dev") == dev_views
    # A deleted name can be created again, from main.
    cli("branch", "delete", project, "dev", "--warehouse", warehouse)
    again = cli("branch", "create", project, "dev", "--warehouse", warehouse)
    assert again.exit_code == 0, again.output
    assert set(view_tables(warehouse, "dev")) == set(view_tables(warehouse, "main"))
