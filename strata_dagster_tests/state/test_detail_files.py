"""A history record's bulky values live in a detail file beside the warehouse (state/detail_files.py):
read back exactly as written, written with the transaction that names them and removed when it
rolls back; a lost file makes the live state's model rebuilt in full (W005), `strata doctor` names
it (E038) and a file no record names (a write cut short) is a leftover `strata gc` removes."""

import json
import shutil

import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.backends.duckdb.snapshot_files import STORAGE_ENV, folder_of
from strata_dagster.backends.opening import open_session
from strata_dagster.cli.main import main
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.run import run_project
from strata_dagster.state.detail_files import FOLDER, INLINE_LIMIT, STORED, DetailFiles
from strata_dagster.state.history import (
    EntryModel,
    HistoryReader,
    HistoryWriter,
    SnapshotRecord,
    detail_file_problem,
)
from strata_dagster.state.migrations import migrate
from strata_dagster_tests.support.engine_support import execute, make_shop

FIGURES = {f"partition-{day:03d}": [day * 10, str(day * 12345678901)] for day in range(100)}
BIG = {
    "strategy": "partitions",
    "merge_keys": ["dt"],
    "partition_fingerprints": FIGURES,
    "segments": ["a", "b"],
}
SMALL = {"strategy": "full", "merge_keys": []}
LONG_SQL = "SELECT " + ", ".join(f"column_{index}" for index in range(400)) + " FROM t"


def record(snapshot_id: str, detail: dict) -> SnapshotRecord:
    return SnapshotRecord(
        snapshot_id, "m", f"snap_{snapshot_id}", "", "fp", "hash", 3, None, 1, detail=detail
    )


def history(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    con = duckdb.connect(str(warehouse))
    migrate(con)
    files = DetailFiles.of(str(warehouse), writes=True)
    assert files is not None
    return con, files, HistoryWriter(con, files), HistoryReader(con, files)


def write_one_run(con, writer) -> None:
    con.execute("BEGIN TRANSACTION")
    writer.add_snapshots([record("big", BIG), record("small", SMALL)])
    writer.add_entry_models(
        1,
        [
            EntryModel(
                "m", "", "big", "key", "partitions", 3, 1.0, LONG_SQL, {"partitions": sorted(FIGURES)}
            ),
            EntryModel("m", "", "small", "key2", "full", 3, 1.0, "SELECT 1", {}),
        ],
    )


def test_bulky_values_are_read_back_from_the_file_exactly_as_written(tmp_path):
    con, files, writer, reader = history(tmp_path)
    write_one_run(con, writer)
    files.sync()
    con.execute("COMMIT")
    files.committed()
    rows = dict(con.execute("SELECT snapshot_id, CAST(detail AS VARCHAR) FROM strata.snapshots").fetchall())
    assert len(rows["big"]) < INLINE_LIMIT and json.loads(rows["big"])[STORED]["keys"] == [
        "partition_fingerprints"
    ]
    assert json.loads(rows["small"]) == SMALL  # a small detail stays whole in its row
    (sql_kept,) = con.execute("SELECT sql FROM strata.entry_models WHERE snapshot_id = 'big'").fetchone()
    assert sql_kept == ""
    # A fresh reader (another process) reads every value back, the marker never among them.
    fresh = HistoryReader(con, DetailFiles.of(str(tmp_path / "w.duckdb")))
    big = fresh.snapshot("big")
    assert big is not None and dict(big.detail) == BIG and "partition_fingerprints" in big.detail
    assert STORED not in big.detail and big.detail.get("window") is None
    assert dict(fresh.snapshot("small").detail) == SMALL
    models = {model.snapshot_id: model for model in fresh.entry_models(1)}
    assert models["big"].sql == LONG_SQL and dict(models["big"].detail) == {"partitions": sorted(FIGURES)}
    assert models["small"].sql == "SELECT 1" and dict(models["small"].detail) == {}
    assert len(list(files.folder.iterdir())) == 2  # one file per write: the snapshots', the entry's
    assert reader.detail_file_names() == {path.name for path in files.folder.iterdir()}
    # A record written again from one read back (a carried-over state) moves its values again.
    writer.add_snapshots([record("again", big.detail)])
    assert dict(fresh.snapshot("again").detail) == BIG


def test_a_lost_file_leaves_the_inline_values_and_is_named(tmp_path):
    con, files, writer, _ = history(tmp_path)
    write_one_run(con, writer)
    con.execute("COMMIT")
    shutil.rmtree(files.folder)
    reader = HistoryReader(con, DetailFiles.of(str(tmp_path / "w.duckdb")))
    big = reader.snapshot("big")
    assert big is not None and dict(big.detail) == {
        key: BIG[key] for key in BIG if key != "partition_fingerprints"
    }
    assert "partition_fingerprints" not in big.detail and big.detail.get("partition_fingerprints") is None
    path, problem = detail_file_problem(big)
    assert path.parent == files.folder and problem == "missing"
    assert detail_file_problem(reader.snapshot("small")) is None
    assert {model.snapshot_id: model.sql for model in reader.entry_models(1)} == {
        "big": "",
        "small": "SELECT 1",
    }


def test_a_transaction_rolled_back_leaves_no_detail_file(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=200)
    run_project(project, warehouse)
    files = folder_of(warehouse) / FOLDER
    before = sorted(path.name for path in files.iterdir())
    with open_session(warehouse) as session, pytest.raises(RuntimeError):
        with session.transaction():
            session.writer.add_snapshots([record("x", BIG)])
            assert len(list(files.iterdir())) == len(before) + 1
            raise RuntimeError("the run fails before its commit")
    assert sorted(path.name for path in files.iterdir()) == before


def test_a_file_written_outside_a_transaction_outlives_a_later_rollback(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=200)
    run_project(project, warehouse)
    with open_session(warehouse) as session:
        session.writer.add_snapshots([record("autocommitted", BIG)])  # its row is committed at once
        with pytest.raises(RuntimeError), session.transaction():
            raise RuntimeError("a later transaction fails")
        kept = session.history.snapshot("autocommitted")
        assert kept is not None and dict(kept.detail) == BIG


def test_storage_in_the_warehouse_file_keeps_every_detail_in_its_row(tmp_path, monkeypatch):
    monkeypatch.setenv(STORAGE_ENV, "table")
    project, warehouse = make_shop(tmp_path, rows=200)
    run_project(project, warehouse)
    assert not (folder_of(warehouse) / FOLDER).exists()
    (count,) = execute(
        warehouse, f"SELECT count(*) FROM strata.snapshots WHERE CAST(detail AS VARCHAR) LIKE '%{STORED}%'"
    )[0]
    assert count == 0


def built_and_changed(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=300)
    run_project(project, warehouse)
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1, "
        "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND WHERE order_id % 40 = 0",
    )
    run_project(project, warehouse, only_stale=True)
    return project, warehouse


def live_detail_file(warehouse, model: str):
    with open_session(warehouse, read_only=True) as session:
        head = session.history.snapshot(session.history.pointers("main")[model][-1])
        (text,) = session.con.execute(
            "SELECT CAST(detail AS VARCHAR) FROM strata.snapshots WHERE snapshot_id = ?", [head.snapshot_id]
        ).fetchone()
    marker = json.loads(text)[STORED]
    return folder_of(warehouse) / FOLDER / marker["file"]


def invoke(*args):
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_a_lost_detail_file_of_a_live_state_is_named_by_doctor_and_rebuilt_in_full(tmp_path, detail_in_files):
    project, warehouse = built_and_changed(tmp_path)
    lost = live_detail_file(warehouse, "daily_revenue")
    lost.unlink()
    report = json.loads(invoke("doctor", project, "--warehouse", warehouse, "--json").output)
    named = [finding for finding in report["findings"] if str(lost) in finding["subject"]]
    assert not report["is_healthy"] and named and named[0]["code"] == "E038", report
    assert "daily_revenue" in named[0]["subject"] and "--models" in named[0]["repair"]
    result = run_project(project, warehouse, only_stale=True)
    assert "daily_revenue" in result.rebuilt_damaged and result.outcome("daily_revenue").path == "full"
    assert verify(project, warehouse).is_equal
    after = json.loads(invoke("doctor", project, "--warehouse", warehouse, "--json").output)
    assert after["is_healthy"], after  # only an older state named it now: a warning


def test_a_detail_file_no_record_names_is_a_leftover_gc_removes(tmp_path, detail_in_files):
    project, warehouse = built_and_changed(tmp_path)
    folder = folder_of(warehouse) / FOLDER
    named = sorted(path.name for path in folder.iterdir())
    stray = folder / "0123456789abcdef.jsonl"  # what a run killed before its commit leaves
    stray.write_text('{"detail": {}, "sql": null}\n')
    report = json.loads(invoke("doctor", project, "--warehouse", warehouse, "--json").output)
    assert report["is_healthy"] and any(
        f["subject"] == str(stray) and f["code"] is None for f in report["findings"]
    )
    collected = invoke("gc", project, "--warehouse", warehouse, "--keep", 5)
    assert collected.exit_code == 0, collected.output
    assert sorted(path.name for path in folder.iterdir()) == named
    result = run_project(project, warehouse, only_stale=True)
    assert not result.rebuilt_damaged and verify(project, warehouse).is_equal


def test_records_moved_whole_give_the_same_runs_as_records_kept_inline(tmp_path, detail_in_files):
    """The shop, one run after another over the same change, equal to its full rebuild, with every
    detail in files (the property tests run so as well)."""
    project, warehouse = built_and_changed(tmp_path)
    (inline,) = execute(
        warehouse,
        f"SELECT count(*) FROM strata.snapshots WHERE CAST(detail AS VARCHAR) NOT LIKE '%{STORED}%'",
    )[0]
    assert inline == 0
    assert verify(project, warehouse).is_equal
