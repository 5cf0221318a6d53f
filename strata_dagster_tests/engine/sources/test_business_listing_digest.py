"""The listing's digest (backends.duckdb.partition_evidence.listing_digest): a file source whose folders hold exactly
the partitions of the ledger's digest is decided from the listing's lists alone, without building
one object per partition. Any difference in a name, a size, a folder or the number of folders
must still reach the per-partition comparison, and so the same coded error naming the same
partition; an unchanged source must read exactly as the per-partition comparison reads it."""

import os
import shutil
from pathlib import Path

import duckdb
import pytest

from strata_dagster.backends.opening import open_session
from strata_dagster.engine.context import load_context
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources import business
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.business_support import day, make_file_project, write_file_partition
from strata_dagster_tests.support.engine_support import execute

DAYS = 5


def _folder(project: Path, index: int) -> Path:
    return project / "events" / f"dt={day(index).isoformat()}"


def _read(project: Path, warehouse: Path, source: str = "events"):
    """What a run would read of the source now: the reading, or the coded error's code, subject
    and message."""
    with open_session(warehouse) as session:
        context = load_context(session, project, {})
        try:
            return business.read_business_source(session, context, source, is_full_refresh=False)
        except StrataError as error:
            return (error.code, error.subject, error.message)


def _read_without_digest(project: Path, warehouse: Path, scratch: Path, source: str = "events"):
    """The same, on a copy of the warehouse whose digests are gone: the per-partition comparison."""
    copy = scratch / "no_digest.duckdb"
    shutil.copyfile(warehouse, copy)
    execute(copy, "DELETE FROM strata.source_ledger_digest")
    return _read(project, copy, source)


def _comparable(reading):
    if isinstance(reading, tuple):
        return reading
    return (
        reading.consumed,
        reading.new,
        reading.deferred,
        reading.fingerprint,
        reading.row_count,
        reading.reset_reason,
        reading.violations,
        reading.expired,
        reading.partition_count,
        reading.last_partition,
        business.describe_relation(reading),
    )


def _is_decided_by_the_listing(reading) -> bool:
    """Told unchanged by the listing's digest, with no partition built yet (`consumed` is built
    when first read)."""
    return reading.is_decided_by_listing and reading.is_ledger_unchanged and "consumed" not in vars(reading)


def _consumed(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    project, warehouse = make_file_project(tmp_path, extra)
    for index in range(DAYS):
        write_file_partition(project, index, 3 + index)
    run_project(project, warehouse)
    return project, warehouse


def test_an_unchanged_source_is_decided_from_the_listing_and_reads_as_the_ledger_rows_would(tmp_path):
    project, warehouse = _consumed(tmp_path)
    fast = _read(project, warehouse)
    assert _is_decided_by_the_listing(fast)
    assert (fast.partition_count, fast.last_partition) == (DAYS, day(DAYS - 1).isoformat())
    assert fast.version()["partitions"] == DAYS
    slow = _read_without_digest(project, warehouse, tmp_path)
    assert not slow.is_ledger_unchanged
    assert _comparable(fast) == _comparable(slow)  # builds the partitions, from the listing
    assert [item.rows for item in fast.consumed] == [3, 4, 5, 6, 7]  # the recorded row counts
    assert run_project(project, warehouse, only_stale=True).is_noop


# Each change keeps the number of folders the ledger holds, so only the digest can tell it.
def _rewrite_in_place(project: Path, index: int) -> None:
    with open(_folder(project, index) / "part-0.parquet", "ab") as file:
        file.write(b"tail")


def _add_file(project: Path, index: int) -> None:
    shutil.copyfile(_folder(project, index) / "part-0.parquet", _folder(project, index) / "part-1.parquet")


def _rename_file(project: Path, index: int) -> None:
    os.rename(_folder(project, index) / "part-0.parquet", _folder(project, index) / "part-9.parquet")


def _replace_by_a_new_day(project: Path, index: int) -> None:
    shutil.rmtree(_folder(project, index))
    write_file_partition(project, DAYS, 3)


def _rename_to_a_new_day(project: Path, index: int) -> None:
    os.rename(_folder(project, index), _folder(project, DAYS))


CHANGES = [_rewrite_in_place, _add_file, _rename_file, _replace_by_a_new_day, _rename_to_a_new_day]


@pytest.mark.parametrize("index", range(DAYS))
@pytest.mark.parametrize("change", CHANGES, ids=[change.__name__ for change in CHANGES])
def test_a_change_that_keeps_the_number_of_folders_is_still_e052_naming_the_partition(
    tmp_path, change, index
):
    project, warehouse = _consumed(tmp_path)
    assert _is_decided_by_the_listing(_read(project, warehouse))
    change(project, index)
    assert len(list((project / "events").iterdir())) == DAYS
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert caught.value.code == "E052"
    assert caught.value.subject == f"events/{day(index).isoformat()}"
    assert _read(project, warehouse) == _read_without_digest(project, warehouse, tmp_path)


def test_a_new_folder_is_read_partition_by_partition_and_consumed(tmp_path):
    project, warehouse = _consumed(tmp_path)
    write_file_partition(project, DAYS, 2)
    reading = _read(project, warehouse)
    assert not _is_decided_by_the_listing(reading)
    assert [item.key for item in reading.new] == [day(DAYS).isoformat()]
    assert _comparable(reading)[1:] == _comparable(_read_without_digest(project, warehouse, tmp_path))[1:]
    assert run_project(project, warehouse, only_stale=True).outcome("events_log").path == "delta"
    assert _is_decided_by_the_listing(_read(project, warehouse))


def test_folders_of_several_files_and_a_marker_read_as_the_ledger_rows_would(tmp_path):
    """Two files per folder (evidence joined per file) and `complete_when`: a consumed folder whose
    marker went stays consumed, as the per-partition comparison keeps it; a rewritten second file
    is E052 naming its day."""
    project, warehouse = make_file_project(tmp_path, "  complete_when: '_SUCCESS'")
    for index in range(DAYS):
        write_file_partition(project, index, 3, marker="_SUCCESS")
        write_file_partition(project, index, 2 + index, part=1, seed=index, marker="_SUCCESS")
    run_project(project, warehouse)
    fast = _read(project, warehouse)
    assert _is_decided_by_the_listing(fast)
    assert _comparable(fast) == _comparable(_read_without_digest(project, warehouse, tmp_path))
    assert fast.consumed[0].evidence.count(";") == 1
    (_folder(project, 1) / "_SUCCESS").unlink()
    fast = _read(project, warehouse)
    assert _is_decided_by_the_listing(fast)
    assert _comparable(fast) == _comparable(_read_without_digest(project, warehouse, tmp_path))
    with open(_folder(project, 2) / "part-1.parquet", "ab") as file:
        file.write(b"tail")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert (caught.value.code, caught.value.subject) == ("E052", f"events/{day(2).isoformat()}")


BATCHES = """
source batches {
  path: 'batches/*/*.parquet'
  partitioned_by: batch
  start: %(start)s
  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true
}
model batch_log {
  from batches
  incremental
  merge_strategy: append
  cdc_column: batch
}
"""


def _write_batch(project: Path, batch: int) -> None:
    folder = project / "batches" / f"batch={batch}"
    folder.mkdir(parents=True)
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT range + {batch} * 100 AS id FROM range({batch})) TO '{folder / 'part-0.parquet'}' (FORMAT parquet)"
        )
    finally:
        con.close()


def test_integer_keys_of_several_widths_are_decided_from_the_listing_in_numeric_order(tmp_path):
    """Folder names sort `batch=10` before `batch=9`; the ledger holds the partitions in numeric
    order. The listing is put in that order first, or every run would compare partition by
    partition."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "batches.strata").write_text(BATCHES % {"start": "1"})
    warehouse = tmp_path / "w.duckdb"
    for batch in (1, 2, 9, 10, 11):
        _write_batch(project, batch)
    run_project(project, warehouse)
    fast = _read(project, warehouse, "batches")
    assert _is_decided_by_the_listing(fast)
    assert fast.last_partition == "11"
    slow = _read_without_digest(project, warehouse, tmp_path, "batches")
    assert _comparable(fast) == _comparable(slow)
    assert [item.key for item in fast.consumed] == ["1", "2", "9", "10", "11"]
    assert run_project(project, warehouse, only_stale=True).is_noop
