"""A `path:` source is not scanned again while every file and folder its pattern reaches stays as
a scan found them.

A run records the figures of each scan under the stamp of the pattern's files and folders (inode,
size and times of each) once they have settled; a later read that finds the same stamp takes them.
Each case below changes the files after a recorded scan, and the next run must give what a fresh
warehouse reads from them.
"""

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from strata_dagster.backends import file_stamps
from strata_dagster.backends.file_stamps import files_stamp
from strata_dagster.cli.main import main
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.engine.sources.source_verify import verify_sources
from strata_dagster_tests.support.engine_support import execute, row_multiset
from strata_dagster_tests.support.stamp_support import (
    assert_a_hidden_write_is_found_by_verify,
    fresh_fingerprint,
    recorded,
    settle,
)

PATTERN = "data/*/*.parquet"


def write_file(path: Path, first_id: int, rows: int = 200) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    execute(
        path.parent / "scratch.duckdb",
        f"COPY (SELECT range AS id, range % 7 AS status, range * 3 AS amount "
        f"FROM range({first_id}, {first_id + rows})) TO '{path}' (FORMAT parquet)",
    )
    (path.parent / "scratch.duckdb").unlink()


@pytest.fixture
def folder(tmp_path):
    project = tmp_path / "project"
    for day, first_id in (("day=1", 0), ("day=2", 1000)):
        write_file(project / "data" / day / "part-0.parquet", first_id)
    (project / "m.strata").write_text(
        f"source orders {{\n  path: '{PATTERN}'\n}}\n"
        "model copy {\n  from orders\n  select id, status, amount\n}\n"
        "model by_status {\n  from orders\n  group status\n  aggregate n = count(*), total = sum(amount)\n}\n"
    )
    return project, tmp_path / "warehouse.duckdb"


def assert_live_models_read_the_files(project: Path, warehouse: Path) -> None:
    files = f"read_parquet('{project / PATTERN}')"
    assert row_multiset(warehouse, "main.v_copy") == execute(
        warehouse,
        f"SELECT CAST(r AS VARCHAR), count(*) FROM (SELECT id, status, amount FROM {files}) AS r "
        "GROUP BY 1 ORDER BY 1",
    )
    expected = execute(warehouse, f"SELECT status, count(*), sum(amount) FROM {files} GROUP BY 1 ORDER BY 1")
    assert execute(warehouse, "SELECT status, n, total FROM main.v_by_status ORDER BY 1") == expected


def test_settled_files_are_read_from_the_record_of_their_last_scan(folder):
    project, warehouse = folder
    settle()
    run_project(project, warehouse)
    [(name, stamp, rows, _)] = recorded(warehouse)
    assert (name, stamp, rows) == ("orders", files_stamp(str(project / PATTERN)).text, 400)
    truth = fresh_fingerprint(project, warehouse.parent)
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint == truth
    # The record is what a read takes: altered, it changes the figures a read gives.
    execute(warehouse, "UPDATE strata.source_stamps SET row_hash_sum = '12345'")
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint != truth
    execute(warehouse, "DELETE FROM strata.source_stamps")
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert len(recorded(warehouse)) == 1
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert len(recorded(warehouse)) == 1  # the record was taken: nothing new to record


def _rewritten(data: Path) -> None:
    write_file(data / "day=1" / "part-0.parquet", 5000)


def _rewritten_with_old_times(data: Path) -> None:
    # `cp -p`, `rsync -t`, an archive's extraction: same inode, size and modification time; only
    # the status-change time, which no one can set, tells.
    target = data / "day=2" / "part-0.parquet"
    before = os.stat(target)
    write_file(data / "other" / "x.parquet", 1000 + 7)  # the same size: the same column widths
    shutil.copyfile(data / "other" / "x.parquet", target)
    shutil.rmtree(data / "other")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(target)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def _added_to_a_folder(data: Path) -> None:
    write_file(data / "day=1" / "part-1.parquet", 9000, rows=5)


def _added_in_a_new_folder(data: Path) -> None:
    write_file(data / "day=3" / "part-0.parquet", 7000, rows=3)


def _removed(data: Path) -> None:
    (data / "day=1" / "part-0.parquet").unlink()


def _renamed_onto_another(data: Path) -> None:
    os.replace(data / "day=2" / "part-0.parquet", data / "day=1" / "part-0.parquet")


CHANGES = {
    "a file rewritten": _rewritten,
    "a file rewritten with its old times": _rewritten_with_old_times,
    "a file added to a folder": _added_to_a_folder,
    "a file added in a new folder": _added_in_a_new_folder,
    "a file removed": _removed,
    "a file renamed onto another": _renamed_onto_another,
}


def test_every_change_to_settled_files_is_seen(folder):
    project, warehouse = folder
    settle()
    run_project(project, warehouse)
    for what, change in CHANGES.items():
        change(project / "data")
        settle()  # the change's stamp settles: only a stamp equal to the recorded one could hide it
        assert run_project(project, warehouse, only_stale=True).run_id is not None, what
        assert_live_models_read_the_files(project, warehouse)
        fingerprint = observe_sources(project, warehouse, ["orders"])["orders"].fingerprint
        assert fingerprint == fresh_fingerprint(project, warehouse.parent), what
    assert len(recorded(warehouse)) == 1 + len(CHANGES)


def test_a_file_added_then_removed_after_a_stamp_changes_it(folder):
    """A file added after the stamp was taken, read by the scan, then removed: the files listed
    are as before, but their folder's times moved, so the next run scans again."""
    project, warehouse = folder
    pattern = str(project / PATTERN)
    settle()
    before = files_stamp(pattern)
    assert before is not None and before.is_settled
    extra = project / "data" / "day=2" / "part-9.parquet"
    write_file(extra, 8000, rows=4)
    extra.unlink()
    settle()
    after = files_stamp(pattern)
    assert after is not None and after.text != before.text
    run_project(project, warehouse)
    assert len(recorded(warehouse)) == 1
    write_file(extra, 8000, rows=4)
    extra.unlink()
    settle()
    assert run_project(project, warehouse, only_stale=True).run_id is None  # the same rows
    assert len(recorded(warehouse)) == 2  # scanned again, under the new stamp
    assert_live_models_read_the_files(project, warehouse)


def test_files_written_just_before_a_run_are_scanned_and_not_recorded(folder):
    project, warehouse = folder
    assert not files_stamp(str(project / PATTERN)).is_settled
    run_project(project, warehouse)
    assert recorded(warehouse) == []  # its stamp could still be its next write's
    settle()
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert len(recorded(warehouse)) == 1


def test_what_a_pattern_reaches(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c"
    write_file(deep / "x.parquet", 0, rows=2)
    settle()
    recursive, shallow = str(tmp_path / "a" / "**" / "*.parquet"), str(tmp_path / "a" / "*.parquet")
    before = {pattern: files_stamp(pattern).text for pattern in (recursive, shallow)}
    write_file(deep / "y.parquet", 0, rows=2)
    assert files_stamp(recursive).text != before[recursive]  # `**` reaches every level
    assert files_stamp(shallow).text == before[shallow]  # one level: a change three down is not read
    single = deep / "x.parquet"
    assert files_stamp(str(single)).text == files_stamp(str(single)).text
    assert files_stamp("s3://bucket/orders/*.parquet") is None  # remote: scanned every run
    assert files_stamp(str(tmp_path / "missing" / "*.parquet")) is None
    monkeypatch.setattr(file_stamps, "MAX_ENTRIES", 3)
    assert files_stamp(recursive) is None  # too many entries to list every run: scanned


def test_verify_sources_rescans_stamped_files_and_replaces_a_record_they_contradict(folder):
    """A file system that kept the files' times through a write (simulated: the record of the old
    rows moved onto the new stamp) hides it from every run; `verify --sources` finds it, and the
    record it leaves makes the next run rebuild."""
    project, warehouse = folder
    settle()
    run_project(project, warehouse)
    assert [(check.is_stamped, check.mismatched) for check in verify_sources(project, warehouse)] == [
        (True, ())
    ]
    _rewritten(project / "data")
    settle()
    assert_a_hidden_write_is_found_by_verify(project, warehouse, files_stamp(str(project / PATTERN)).text)
    assert_live_models_read_the_files(project, warehouse)


def test_gc_keeps_only_the_record_a_read_takes(folder):
    """Each recorded scan of changed files adds a record; gc keeps each source's newest, which the
    next read takes: the run after it scans nothing."""
    project, warehouse = folder
    settle()
    run_project(project, warehouse)
    for first_id in (5000, 6000):
        write_file(project / "data" / "day=1" / "part-0.parquet", first_id)
        settle()
        assert run_project(project, warehouse, only_stale=True).run_id is not None
    newest = recorded(warehouse)[-1]
    assert len(recorded(warehouse)) == 3
    report = CliRunner().invoke(main, ["gc", str(project), "--warehouse", str(warehouse), "--keep", "1"])
    assert report.exit_code == 0, report.output
    assert "source stamps: removed 2 records" in report.output
    assert recorded(warehouse) == [newest]
    execute(warehouse, "UPDATE strata.source_stamps SET row_hash_sum = '12345'")
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint != fresh_fingerprint(
        project, warehouse.parent
    )  # the record kept is the one a read takes
    assert gc(warehouse, keep=1).stamps_pruned == 0
