"""The partition listing of a business-versioned Parquet folder (backends.duckdb.partition_evidence) finds exactly
what Python's glob (and so DuckDB's) finds for the same pattern, on the scandir fast path and off it;
with its cache of folder names (backends.duckdb.listing) it still sees every change a listing shows."""

import glob
import marshal
import os
import shutil
import time
from pathlib import Path

import pytest

from strata_dagster.backends.duckdb import listing
from strata_dagster.backends.duckdb.partition_evidence import matching_files
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.state.ledger import order_of
from strata_dagster_tests.support.business_support import day, make_file_project, write_file_partition


def _layout(root):
    for path in (
        "dt=2026-03-01/part-0.parquet",
        "dt=2026-03-01/part-1.parquet",
        "dt=2026-03-01/_SUCCESS",
        "dt=2026-03-01/.part-2.parquet.crc",
        "dt=2026-03-02/part-0.parquet",
        "dt=2026-03-02/notes.txt",
        ".hidden/part-0.parquet",
        "stray.parquet",
        "dt=2026-03-03/nested/part-0.parquet",
        "dt=2026-03-04/dir.parquet/part-0.parquet",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")
    os.symlink(root / "dt=2026-03-02", root / "dt=2026-03-05")


@pytest.mark.parametrize(
    "tail", ["*/*.parquet", "*/part-0.parquet", "*/part-[01].parquet", "*/*", "dt=*/*.parquet", "*.parquet"]
)
def test_the_listing_matches_glob(tmp_path, tail):
    _layout(tmp_path)
    pattern = f"{tmp_path}/{tail}"
    assert matching_files(pattern) == sorted(glob.glob(pattern))


def test_a_missing_folder_lists_nothing(tmp_path):
    assert matching_files(f"{tmp_path}/absent/*/*.parquet") == []


def test_partition_keys_order_in_time_and_numerically():
    keys = ["2026-03-10", "2026-03-02", "2026-03-02 10:00:00"]
    assert sorted(keys, key=order_of) == ["2026-03-02", "2026-03-02 10:00:00", "2026-03-10"]
    assert sorted(["10", "9", "-1"], key=order_of) == ["-1", "9", "10"]


# -- the listing cache (backends.duckdb.listing) ------------------------------------------------------------


def _aged(seconds: float = listing.RACY_SECONDS + 0.2) -> None:
    """Let every folder written so far become older than the racy window, so the cache trusts it."""
    time.sleep(seconds)


def _days(project) -> list[str]:
    return sorted(path.name for path in (project / "events").iterdir())


def test_a_cached_listing_still_sees_every_change_to_a_consumed_folder(tmp_path):
    """With the cache trusted (folders older than the racy window), each mutation of a consumed
    folder still fails the next run with E052 naming that day: an in-place rewrite (the folder's
    stat unchanged), and a file added or removed with the folder's mtime set back (its ctime moves)."""
    project, warehouse = make_file_project(tmp_path)
    for index in range(4):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    _aged()
    run_project(project, warehouse, only_stale=True)  # lists every folder again and caches them settled
    (cache,) = (tmp_path / ("w.duckdb" + listing.CACHE_SUFFIX)).iterdir()
    written = cache.stat().st_mtime_ns
    assert run_project(project, warehouse, only_stale=True).is_noop
    assert cache.stat().st_mtime_ns == written  # every folder trusted: nothing listed anew

    def folder(index: int) -> Path:
        return project / "events" / f"dt={day(index).isoformat()}"

    def expect_e052(index: int) -> None:
        with pytest.raises(StrataError) as caught:
            run_project(project, warehouse, only_stale=True)
        assert caught.value.code == "E052"
        assert caught.value.subject == f"events/{day(index).isoformat()}"

    # 1. Rewritten in place with another size: the folder's own stat does not change.
    before = os.stat(folder(0))
    with open(folder(0) / "part-0.parquet", "ab") as file:
        file.write(b"tail")
    assert (os.stat(folder(0)).st_mtime_ns, os.stat(folder(0)).st_ctime_ns) == (
        before.st_mtime_ns,
        before.st_ctime_ns,
    )
    expect_e052(0)
    write_file_partition(project, 0, 5)  # put the day back as consumed (same rows, same size)
    assert run_project(project, warehouse, only_stale=True).is_noop

    # 2. A file added, the folder's mtime set back as `rsync -t` would: its ctime still moves.
    before = os.stat(folder(1))
    (folder(1) / "part-1.parquet").write_bytes((folder(1) / "part-0.parquet").read_bytes())
    os.utime(folder(1), ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(folder(1)).st_mtime_ns == before.st_mtime_ns
    expect_e052(1)
    (folder(1) / "part-1.parquet").unlink()
    os.utime(folder(1), ns=(before.st_atime_ns, before.st_mtime_ns))
    assert run_project(project, warehouse, only_stale=True).is_noop

    # 3. The only file removed, mtime set back again.
    before = os.stat(folder(2))
    saved = (folder(2) / "part-0.parquet").read_bytes()
    (folder(2) / "part-0.parquet").unlink()
    os.utime(folder(2), ns=(before.st_atime_ns, before.st_mtime_ns))
    expect_e052(2)
    (folder(2) / "part-0.parquet").write_bytes(saved)
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_a_folder_changed_within_the_racy_window_is_listed_again(tmp_path):
    """A folder whose names changed but whose stat did not (two changes within one clock tick) is
    told apart by age: a folder listed less than RACY_SECONDS after its last change is not trusted
    (listed again on every run until it is listed late enough). Stood for here by a cache claiming
    other names under the folder's real stat."""
    root = tmp_path / "events"
    (root / "dt=2026-03-01").mkdir(parents=True)
    (root / "dt=2026-03-01" / "part-0.parquet").write_bytes(b"x" * 10)
    cache_dir = tmp_path / "cache"
    assert _sizes(listing.list_folders(str(root), "*.parquet", None, cache_dir)) == {"part-0.parquet": 10}
    (cache,) = cache_dir.iterdir()

    def forge_names() -> bool:
        """Replace the folder's cached names, keeping its stat and trust; whether it was trusted."""
        version, listed_root, fields = marshal.loads(cache.read_bytes())
        columns = listing._Columns(*fields)
        assert columns.folders == "dt=2026-03-01" and columns.names == "part-0.parquet"
        forged = columns._replace(names="part-9.parquet", paths="dt=2026-03-01/part-9.parquet")
        cache.write_bytes(marshal.dumps((version, listed_root, tuple(forged))))
        return columns.settled == b"\x01"

    # Listed in the same instant as the change: not trusted, so the folder is read again.
    assert not forge_names()
    assert _sizes(listing.list_folders(str(root), "*.parquet", None, cache_dir)) == {"part-0.parquet": 10}
    _aged()
    listing.list_folders(str(root), "*.parquet", None, cache_dir)  # listed long after the change
    # Trusted now: the cache is the folder (a missing name is skipped).
    assert forge_names()
    assert _sizes(listing.list_folders(str(root), "*.parquet", None, cache_dir)) == {}


def _sizes(folders) -> dict[str, int]:
    return {name: size for folder in folders for name, size in folder.files}


@pytest.mark.parametrize(
    "tail", ["*/*.parquet", "*/part-0.parquet", "*/part-[01].parquet", "*/*", "dt=*/*.parquet", "*.parquet"]
)
def test_a_cached_listing_matches_glob_before_and_after_changes(tmp_path, tail):
    _layout(tmp_path / "data")
    pattern = f"{tmp_path}/data/{tail}"
    cache = tmp_path / "cache"
    first = listing.split_pattern(pattern)
    for change in (None, "add", "remove", "rename"):
        if change == "add":
            (tmp_path / "data" / "dt=2026-03-02" / "part-1.parquet").write_text("yy")
        elif change == "remove":
            (tmp_path / "data" / "dt=2026-03-01" / "part-0.parquet").unlink()
        elif change == "rename":
            os.rename(tmp_path / "data" / "dt=2026-03-04", tmp_path / "data" / "dt=2026-03-06")
        expected = sorted(glob.glob(pattern))
        if first is None:
            assert matching_files(pattern) == expected
            continue
        listed = listing.list_folders(*first, "_SUCCESS", cache)
        assert sorted(f"{folder.path}/{name}" for folder in listed for name, _ in folder.files) == expected
        sizes = {f"{folder.path}/{name}": size for folder in listed for name, size in folder.files}
        assert sizes == {path: os.stat(path).st_size for path in expected}


def test_gc_removes_the_listing_caches_of_roots_that_are_gone_and_keeps_the_live_ones(tmp_path):
    """`strata gc` keeps the cache of a folder a source still lists (the next run trusts it and
    rewrites nothing), and removes the caches of roots that no longer exist, temporary files a
    writer left, unreadable files; the cache folder goes once nothing is left in it."""
    project, warehouse = make_file_project(tmp_path)
    for index in range(3):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    _aged()
    run_project(project, warehouse, only_stale=True)  # caches every folder settled
    cache_dir = tmp_path / ("w.duckdb" + listing.CACHE_SUFFIX)
    (live,) = cache_dir.iterdir()
    # A root listed once and since deleted (a source whose folder moved), and leftovers.
    gone = tmp_path / "old_events"
    (gone / "dt=2026-03-01").mkdir(parents=True)
    (gone / "dt=2026-03-01" / "part-0.parquet").write_bytes(b"x")
    listing.list_folders(str(gone), "*.parquet", None, cache_dir)
    shutil.rmtree(gone)
    (cache_dir / "abc.marshal.123.tmp").write_bytes(b"partial")
    (cache_dir / "def.marshal").write_bytes(b"not marshal")
    assert len(list(cache_dir.iterdir())) == 4

    result = gc(warehouse, keep=1)
    assert result.listings_removed == 3
    assert list(cache_dir.iterdir()) == [live]
    written = live.stat().st_mtime_ns
    assert run_project(project, warehouse, only_stale=True).is_noop
    assert live.stat().st_mtime_ns == written  # still trusted: nothing listed anew

    shutil.rmtree(project / "events")
    assert gc(warehouse, keep=1).listings_removed == 1
    assert not cache_dir.exists()


def test_a_file_source_whose_every_file_is_gone_is_e012_with_and_without_a_full_refresh(tmp_path):
    """No statement is sent over a folder with no file (it would fail and abort the run's
    transaction, surfacing as a raw TransactionException on the next statement)."""
    project, warehouse = make_file_project(tmp_path)
    for index in range(2):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    shutil.rmtree(project / "events")
    (project / "events").mkdir()
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert caught.value.code == "E052"  # the consumed partitions are gone: a broken assumption
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, full_refresh=True)
    assert caught.value.code == "E012"
    assert "no file matching `events/*/*.parquet`" in caught.value.message
    assert "consumed partitions are gone" in caught.value.message
    write_file_partition(project, 0, 3)  # files again: the source is read as it is now
    assert run_project(project, warehouse, full_refresh=True).outcome("events_log").path == "full"
