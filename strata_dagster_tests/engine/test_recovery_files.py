"""Every file the engine owns, damaged, lost, copied or moved, is found before it is used and
repaired by the documented commands: a project folder copied or restored elsewhere reads its own
files with no write first; a lost or damaged snapshot file is rebuilt by the next run (W005) and
named by verify (E038); a damaged serving catalog is written again by the next write and is E039
for readers; a truncated warehouse file is E020 for every command, never a traceback."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.backends.duckdb import serving
from strata_dagster.backends.duckdb.relocation import RELOCATED_STEP
from strata_dagster.backends.duckdb.serving import SERVING_STEPS
from strata_dagster.backends.duckdb.snapshot_files import folder_of
from strata_dagster.backends.opening import open_session
from strata_dagster.cli.main import main
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.reads.catalog import read_catalog
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.faults import KILL_AT_ENV
from strata_dagster_tests.support.acceptance_support import MODELS, Sources, make_project
from strata_dagster_tests.support.engine_support import execute, make_shop
from strata_dagster_tests.support.engines_support import engine_under_test, normalised, spark_params
from strata_dagster_tests.support.serving_support import served_state, warehouse_state


def invoke(*args):
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    # A coded error exits through SystemExit; anything else is a traceback the user would see.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One built shop (a full run and an incremental one); tests work on copies of its folder."""
    root = tmp_path_factory.mktemp("template")
    project, warehouse = make_shop(root, rows=200)
    run_project(project, warehouse)
    con = duckdb.connect(str(warehouse))
    try:
        con.execute(
            "UPDATE raw.orders SET amount = amount + 1, "
            "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND WHERE order_id % 50 = 0"
        )
    finally:
        con.close()
    run_project(project, warehouse, only_stale=True)
    return root


def copy_of(template: Path, into: Path, *, settle: bool = True) -> tuple[Path, Path]:
    """The template's folder copied as `cp -a` does; settled: written once where it now is."""
    shutil.copytree(template, into, symlinks=True)
    project, warehouse = into / "shop", into / "warehouse.duckdb"
    if settle:
        run_project(project, warehouse, only_stale=True)
    return project, warehouse


def folders_read(warehouse: Path) -> set[str]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute(
            "SELECT regexp_extract(sql, 'read_parquet\\(''(.*)/[^/]*''\\)', 1) FROM duckdb_views() "
            "WHERE schema_name = 'strata_snapshots' AND contains(sql, 'read_parquet(')"
        ).fetchall()
    finally:
        con.close()
    return {row[0] for row in rows}


# -- a project folder copied, moved or restored --------------------------------------------------


def test_a_copied_project_is_read_from_its_own_files_with_no_write_first(template, tmp_path, monkeypatch):
    copy_of(template, tmp_path / "shop_a")
    before = served_state(tmp_path / "shop_a" / "warehouse.duckdb")
    project, warehouse = copy_of(tmp_path / "shop_a", tmp_path / "shop_b", settle=False)
    shutil.rmtree(tmp_path / "shop_a")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a reader whose working directory is neither project
    printed = invoke("connect", project, "--warehouse", warehouse, "--print")
    assert printed.exit_code == 0, printed.output
    con = duckdb.connect()
    try:
        con.execute(printed.output.strip())
        assert con.execute("SELECT count(*) FROM main.v_daily_revenue").fetchone()[0] > 0
    finally:
        con.close()
    assert served_state(warehouse) == before
    # The commands that only read work too, and the first of them points the copy's views at its
    # own files (nothing is left reading the removed folder).
    for command in (["history"], ["plan", "--only-stale"], ["show", "daily_revenue"]):
        result = invoke(*command[:1], project, *command[1:], "--warehouse", warehouse)
        assert result.exit_code == 0, (command, result.output)
    assert folders_read(warehouse) == {str(folder_of(warehouse))}
    assert warehouse_state(warehouse) == before
    assert invoke("verify", project, "--warehouse", warehouse).exit_code == 0


def test_a_moved_project_opened_only_to_read_reads_the_files_beside_it(template, tmp_path):
    copy_of(template, tmp_path / "first")
    shutil.move(tmp_path / "first", tmp_path / "moved")
    project, warehouse = tmp_path / "moved" / "shop", tmp_path / "moved" / "warehouse.duckdb"
    # What a Dagster code location reads when it loads: the first command after the move.
    assert not read_catalog(project, warehouse).warnings
    assert folders_read(warehouse) == {str(folder_of(warehouse))}
    plan = invoke("plan", project, "--warehouse", warehouse, "--only-stale")
    assert plan.exit_code == 0 and "nothing to do" in plan.output, plan.output
    assert warehouse_state(warehouse) == served_state(warehouse)


def test_a_catalog_of_the_earlier_format_is_replaced_before_readers_are_given_it(template, tmp_path):
    """A serving catalog written before catalogs named files relatively (format 2) names the
    original folder's files: `strata connect` on the moved project writes a new one first."""
    _, warehouse = copy_of(template, tmp_path / "first")
    live = serving.live_path(warehouse)
    catalog = live.with_name(os.readlink(live))
    manifest = catalog.with_suffix(".json")
    listed = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**listed, "format": 2}))
    relative = f"read_parquet('{folder_of(warehouse).name}/"
    con = duckdb.connect(str(catalog))
    try:
        con.execute("SET file_search_path = ?", [str(warehouse.parent)])
        for (sql,) in con.execute(
            "SELECT sql FROM duckdb_views() WHERE schema_name = 'strata_snapshots' AND contains(sql, ?)",
            [relative],
        ).fetchall():
            absolute = sql.replace(relative, f"read_parquet('{folder_of(warehouse)}/")
            con.execute(absolute.replace("CREATE VIEW", "CREATE OR REPLACE VIEW"))
    finally:
        con.close()
    shutil.move(tmp_path / "first", tmp_path / "moved")
    project, warehouse = tmp_path / "moved" / "shop", tmp_path / "moved" / "warehouse.duckdb"
    printed = invoke("connect", project, "--warehouse", warehouse, "--print")
    assert printed.exit_code == 0, printed.output
    assert served_state(warehouse) == warehouse_state(warehouse)


# -- a lost or damaged snapshot file -------------------------------------------------------------


def _lose_stg_customers(folder: Path) -> None:
    for path in folder.glob("snap_*_stg_customers*.parquet"):
        path.unlink()


def _truncate_stg_customers(folder: Path) -> None:
    for path in folder.glob("snap_*_stg_customers.*.parquet"):
        with open(path, "r+b") as file:
            file.truncate(path.stat().st_size // 2)


DAMAGES = {
    "one model's files removed": _lose_stg_customers,
    "one model's file cut short": _truncate_stg_customers,
    "the whole folder removed": shutil.rmtree,
}
# Models that keep history a full rebuild cannot give (earlier versions, first versions), and a
# model reading them: what a lost file of theirs held is lost with it (a rebuild starts anew).
HISTORY_MODELS = ("main.v_first_seen_orders", "main.v_order_status_log", "main.v_order_timeline")


def without_history(state: list[list]) -> list[list]:
    return [view for view in state if view[0] not in HISTORY_MODELS]


@pytest.mark.parametrize(
    ("damage", "run_args"),
    [
        ("one model's files removed", ["--only-stale"]),
        ("one model's file cut short", []),
        ("the whole folder removed", ["--only-stale"]),
    ],
)
def test_a_lost_snapshot_file_is_rebuilt_by_the_next_run(template, tmp_path, damage, run_args):
    """Plain `run` recomputes every model (early cutoff keeps a live snapshot whose rows it gives
    again) and `--only-stale` reuses snapshots by build key: neither keeps one it cannot read."""
    project, warehouse = copy_of(template, tmp_path / "p")
    before = served_state(warehouse)
    DAMAGES[damage](folder_of(warehouse))
    result = invoke("run", project, "--warehouse", warehouse, *run_args)
    assert result.exit_code == 0, result.output
    assert "warning[W005]" in result.output and "stg_customers" in result.output
    lines = {line.split()[0]: line.split()[1] for line in result.output.splitlines() if " rows " in line}
    assert lines["stg_customers"] == "full", result.output  # neither cutoff nor reused
    assert served_state(warehouse) == warehouse_state(warehouse)
    assert without_history(served_state(warehouse)) == without_history(before)


def test_verify_names_the_lost_file_and_gc_then_a_full_refresh_repair_it(template, tmp_path):
    """The sequence the documentation gives: verify says what is damaged and what repairs it."""
    project, warehouse = copy_of(template, tmp_path / "p")
    before = served_state(warehouse)
    _lose_stg_customers(folder_of(warehouse))
    verify = invoke("verify", project, "--warehouse", warehouse)
    assert verify.exit_code == 1 and "error[E038]" in verify.output, verify.output
    assert "stg_customers" in verify.output and "is missing" in verify.output
    assert "strata run PROJECT --models" in verify.output
    assert invoke("gc", project, "--warehouse", warehouse, "--keep", "1").exit_code == 0
    refresh = invoke("run", project, "--warehouse", warehouse, "--full-refresh")
    assert refresh.exit_code == 0, refresh.output
    assert without_history(served_state(warehouse)) == without_history(before)
    assert invoke("verify", project, "--warehouse", warehouse).exit_code == 0
    assert invoke("gc", project, "--warehouse", warehouse, "--keep", "1").exit_code == 0


def test_rollback_to_a_state_whose_file_is_lost_changes_nothing(template, tmp_path):
    project, warehouse = copy_of(template, tmp_path / "p")
    earlier = json.loads(invoke("history", project, "--warehouse", warehouse, "--json").output)[-1]["run_id"]
    (table,) = execute(
        warehouse,
        "SELECT regexp_extract(sql, 'strata_snapshots\\.(\\w+)', 1) FROM duckdb_views() WHERE view_name = 'v_stg_customers'",
    )[0]
    execute(warehouse, "UPDATE raw.customers SET name = name || '!' WHERE customer_id = 1")
    assert invoke("run", project, "--warehouse", warehouse, "--only-stale").exit_code == 0
    before = served_state(warehouse)
    lost = next(folder_of(warehouse).glob(f"{table}.*.parquet"))  # read by the earlier run's state only
    lost.unlink()
    result = invoke("rollback", project, earlier, "--warehouse", warehouse)
    assert result.exit_code == 1 and "error[E038]" in result.output, result.output
    assert lost.name in result.output
    assert served_state(warehouse) == before


def test_a_python_models_frame_whose_snapshot_file_is_lost_is_written_again(tmp_path):
    """The same frame published again keeps the live snapshot (early cutoff), unless its file is gone."""
    import pyarrow as pa

    from strata_dagster.engine.commands.frames import FrameRequest, publish_frame

    warehouse = tmp_path / "w.duckdb"
    request = FrameRequest(warehouse, "frame_model", pa.table({"x": [1, 2]}), code_version="1")
    first = publish_frame(request)
    assert publish_frame(request).table_name == first.table_name  # kept: nothing written
    for path in folder_of(warehouse).glob(f"{first.table_name}.*.parquet"):
        path.unlink()
    again = publish_frame(request)
    assert again.table_name != first.table_name and again.is_published
    assert sorted(served_state(warehouse)) == sorted(warehouse_state(warehouse))
    assert execute(warehouse, "SELECT sum(x) FROM main.v_frame_model") == [(3,)]


# -- a damaged serving catalog -------------------------------------------------------------------


def _live_catalog(warehouse: Path) -> Path:
    live = serving.live_path(warehouse)
    return live.with_name(os.readlink(live))


def _truncate_catalog(warehouse: Path) -> None:
    catalog = _live_catalog(warehouse)
    with open(catalog, "r+b") as file:
        file.truncate(catalog.stat().st_size // 2)


def _overwrite_catalog(warehouse: Path) -> None:
    _live_catalog(warehouse).write_bytes(os.urandom(100_000))


def _remove_catalog(warehouse: Path) -> None:
    _live_catalog(warehouse).unlink()  # the link now points at nothing


def _corrupt_manifest(warehouse: Path) -> None:
    _live_catalog(warehouse).with_suffix(".json").write_text("{not json")


CATALOG_DAMAGES = {
    "catalog cut short": _truncate_catalog,
    "catalog overwritten": _overwrite_catalog,
    "link to nothing": _remove_catalog,
    "manifest not json": _corrupt_manifest,
}


@pytest.mark.parametrize("damage", CATALOG_DAMAGES)
def test_a_damaged_serving_catalog_is_written_again_by_the_next_run(template, tmp_path, damage):
    """Before, each of these made every later write E035, and `gc` or `connect` a traceback."""
    project, warehouse = copy_of(template, tmp_path / "p")
    before = served_state(warehouse)
    CATALOG_DAMAGES[damage](warehouse)
    printed = invoke("connect", project, "--warehouse", warehouse, "--print")
    if damage in ("catalog cut short", "catalog overwritten"):
        assert printed.exit_code == 1 and "error[E039]" in printed.output, printed.output
        assert "strata run PROJECT --only-stale" in printed.output
    commands = [["gc", "--keep", "1"], ["run", "--only-stale"]]
    if damage == "catalog overwritten":
        commands.insert(0, ["verify"])
    for command in commands:
        result = invoke(command[0], project, "--warehouse", warehouse, *command[1:])
        assert result.exit_code == 0, (command, result.output)
    assert invoke("connect", project, "--warehouse", warehouse, "--print").exit_code == 0
    assert served_state(warehouse) == before
    assert serving.listed_files(_live_catalog(warehouse).with_suffix(".json")) is not None


def test_a_damaged_catalog_that_looks_untouched_is_written_whole_by_a_publishing_run(template, tmp_path):
    """Bytes damaged without a later modification time (restored from a bad copy): the next
    catalog cannot start as its copy, and is written whole instead of failing the run (E035)."""
    project, warehouse = copy_of(template, tmp_path / "p")
    catalog = _live_catalog(warehouse)
    stat = catalog.stat()
    _overwrite_catalog(warehouse)
    os.utime(catalog, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    con = duckdb.connect(str(warehouse))
    try:
        con.execute("UPDATE raw.customers SET name = name || '!' WHERE customer_id = 1")
    finally:
        con.close()
    result = invoke("run", project, "--warehouse", warehouse, "--only-stale")
    assert result.exit_code == 0, result.output
    assert served_state(warehouse) == warehouse_state(warehouse)
    con = duckdb.connect()
    try:
        con.execute(serving.reader_statement(warehouse))
        assert con.execute("SELECT copied_from FROM strata_serving.publication").fetchone()[0] is None
    finally:
        con.close()


# -- a damaged warehouse file --------------------------------------------------------------------


def test_a_truncated_warehouse_file_is_e020_for_every_command(template, tmp_path):
    """Found where a command first reads a block that is not there (DuckDB opens such a file)."""
    project, warehouse = copy_of(template, tmp_path / "p")
    with open(warehouse, "r+b") as file:
        file.truncate(warehouse.stat().st_size // 2)
    for command in (
        ["run"],
        ["run", "--only-stale"],
        ["history"],
        ["gc", "--keep", "1"],
        ["verify"],
        ["plan"],
    ):
        result = invoke(command[0], project, "--warehouse", warehouse, *command[1:])
        assert result.exit_code == 1 and "error[E020]" in result.output, (command, result.output)
        assert "E035" not in result.output and "backup" in result.output


def test_a_catalog_written_whole_leaves_out_the_views_over_a_lost_file(template, tmp_path):
    """A run that does not rebuild the damaged model (not selected) still publishes, and readers
    of every other view are served; the one left out is named to `strata connect` (W005)."""
    project, warehouse = copy_of(template, tmp_path / "p")
    before = dict((view, rest) for view, *rest in served_state(warehouse))
    _lose_stg_customers(folder_of(warehouse))
    _remove_catalog(warehouse)  # the next catalog is written whole: every view is bound again
    result = invoke("run", project, "--warehouse", warehouse, "--models", "stg_orders")
    assert result.exit_code == 0, result.output
    printed = invoke("connect", project, "--warehouse", warehouse, "--print")
    assert printed.exit_code == 0 and "warning[W005]" in printed.output, printed.output
    assert "main.v_stg_customers" in printed.output and "--models stg_customers" in printed.output
    served = dict((view, rest) for view, *rest in served_state(warehouse))
    assert "main.v_stg_customers" not in served
    assert served["main.v_stg_orders"] == before["main.v_stg_orders"]
    assert invoke("run", project, "--warehouse", warehouse, "--only-stale").exit_code == 0
    assert without_history(served_state(warehouse)) == without_history(
        list([v, *r] for v, r in before.items())
    )


@pytest.mark.parametrize("engine_name", spark_params())
def test_a_lost_snapshot_is_named_by_verify_and_rebuilt_by_the_next_run_on_each_engine(engine_name, tmp_path):
    """On Spark a snapshot is a Parquet table: its folder removed is found as a DuckDB file is."""
    with engine_under_test(engine_name, tmp_path) as engine:
        project = make_project(tmp_path)
        sources = Sources()
        for cust, status, value in ((0, "open", 1), (1, "paid", 4), (2, "void", 2), (0, "paid", 5)):
            sources.insert(cust, status, value)
        sources.write(engine)
        engine.run(project)
        before = {model: normalised(engine.live(model)) for model in MODELS}
        with engine.chosen(), open_session(engine.warehouse, read_only=True) as session:
            (table,) = session.view_tables("main", "by_region")
            lost = (
                engine.warehouse / "strata_snapshots.db" / table.lower()
                if engine_name == "spark"
                else session.file_index().paths[table]
            )
        shutil.rmtree(lost) if lost.is_dir() else lost.unlink()
        with engine.chosen(), pytest.raises(StrataError) as refused:
            verify(project, engine.warehouse)
        assert refused.value.code == "E038" and "by_region" in refused.value.message
        result = engine.run(project, only_stale=True)
        assert result.outcome("by_region").path == "full" and set(result.rebuilt_damaged) == {"by_region"}
        assert {model: normalised(engine.live(model)) for model in MODELS} == before
        with engine.chosen():
            assert verify(project, engine.warehouse).is_equal


# -- strata doctor -------------------------------------------------------------------------------


def test_doctor_names_each_damaged_file_and_the_command_that_repairs_it(template, tmp_path):
    project, warehouse = copy_of(template, tmp_path / "p")
    healthy = invoke("doctor", project, "--warehouse", warehouse)
    assert healthy.exit_code == 0 and "0 problems, 0 notes" in healthy.output, healthy.output
    folder = folder_of(warehouse)
    (stg_customers,) = [
        path for path in folder.glob("snap_*_stg_customers.*.parquet") if "__" not in path.name
    ]
    # A whole Parquet file with other rows than recorded: only a full read of its footer tells.
    execute(warehouse, f"COPY (SELECT 1 AS customer_id) TO '{stg_customers}' (FORMAT parquet)")
    (folder / ".snap_x_stg_orders.parquet.123").write_bytes(b"")
    warehouse.with_name(warehouse.name + ".compact").write_bytes(b"")
    _corrupt_manifest(warehouse)
    report = json.loads(invoke("doctor", project, "--warehouse", warehouse, "--json").output)
    assert not report["is_healthy"]
    found = {
        (finding["code"], Path(finding["subject"].split(" ")[0]).name): finding
        for finding in report["findings"]
    }
    snapshot = found["E038", stg_customers.name]
    assert "holds 1 rows" in snapshot["problem"] and "--models stg_customers" in snapshot["repair"]
    assert snapshot["repair"].startswith("move the file away")
    assert ("E039", _live_catalog(warehouse).with_suffix(".json").name) in found
    assert (None, ".snap_x_stg_orders.parquet.123") in found and (None, "warehouse.duckdb.compact") in found
    assert invoke("doctor", project, "--warehouse", warehouse).exit_code == 1
    # The repairs it names: the model rebuilt, the catalog written again, the leftovers collected.
    stg_customers.unlink()  # what an operator does with a file the doctor names (a run then rebuilds)
    assert invoke("run", project, "--warehouse", warehouse, "--models", "stg_customers").exit_code == 0
    assert invoke("gc", project, "--warehouse", warehouse, "--keep", "1", "--compact").exit_code == 0
    after = json.loads(invoke("doctor", project, "--warehouse", warehouse, "--json").output)
    assert after["is_healthy"], after


# -- kills while repairing -----------------------------------------------------------------------


def strata(*args, env=None):
    """The CLI in a process of its own (killed at a step by STRATA_KILL_AT)."""
    command = [sys.executable, "-m", "strata_dagster.cli.main", *(str(arg) for arg in args)]
    return subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True)


def test_a_kill_while_a_damaged_catalog_is_written_again_leaves_it_to_the_next_write(template, tmp_path):
    """Killed after the exports, before the new catalog: the damaged one is still live (after the
    later serving steps the new catalog is whole: test_serving kills there)."""
    step = SERVING_STEPS[0]
    project, warehouse = copy_of(template, tmp_path / "p")
    before = served_state(warehouse)
    _overwrite_catalog(warehouse)
    killed = strata("run", project, "--warehouse", warehouse, "--only-stale", env={KILL_AT_ENV: step})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = strata("run", project, "--warehouse", warehouse, "--only-stale")
    assert again.returncode == 0, again.stderr
    assert served_state(warehouse) == before


def test_a_kill_while_a_reading_command_relocates_leaves_it_to_the_next_command(template, tmp_path):
    copy_of(template, tmp_path / "first")
    before = served_state(tmp_path / "first" / "warehouse.duckdb")
    shutil.move(tmp_path / "first", tmp_path / "moved")
    project, warehouse = tmp_path / "moved" / "shop", tmp_path / "moved" / "warehouse.duckdb"
    killed = strata(
        "plan", project, "--warehouse", warehouse, "--only-stale", env={KILL_AT_ENV: RELOCATED_STEP}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert served_state(warehouse) == before  # readers never needed the relocation
    plan = strata("plan", project, "--warehouse", warehouse, "--only-stale")
    assert plan.returncode == 0 and "nothing to do" in plan.stdout, plan.stdout + plan.stderr
    assert folders_read(warehouse) == {str(folder_of(warehouse))}
