"""The partition listing of a business-versioned Parquet folder (warehouse.ledger) finds exactly
what Python's glob (and so DuckDB's) finds for the same pattern, on the scandir fast path and off it."""

import glob
import os

import pytest

from strata_dagster.warehouse.ledger import matching_files, order_of


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
