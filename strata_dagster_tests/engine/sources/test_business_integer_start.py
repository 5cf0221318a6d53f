"""`start:` of an integer-keyed source (`batch=17/` folders) is an integer; a start of the other
kind than the partition column (a date for integers, an integer for dates) is E055 at compile,
pointing at the `start:` line."""

import warnings
from pathlib import Path

import duckdb
import pytest

from strata_dagster import build_definitions
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.business_support import make_file_project, write_file_partition
from strata_dagster_tests.support.engine_support import row_multiset

BATCHES = """source batches {
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


def _project(root: Path, start: str) -> tuple[Path, Path]:
    project = root / "project"
    (project / "batches").mkdir(parents=True)
    (project / "batches.strata").write_text(BATCHES % {"start": start})
    return project, root / "w.duckdb"


def _write_batch(project: Path, batch: int) -> None:
    folder = project / "batches" / f"batch={batch}"
    folder.mkdir()
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT range + {batch} * 100 AS id FROM range(3)) TO '{folder / 'part-0.parquet'}' (FORMAT parquet)"
        )
    finally:
        con.close()


def test_an_integer_keyed_source_starts_at_an_integer(tmp_path):
    project, warehouse = _project(tmp_path, "1")
    for batch in (1, 2):
        _write_batch(project, batch)
    run_project(project, warehouse)
    _write_batch(project, 3)
    assert run_project(project, warehouse, only_stale=True).outcome("batch_log").path == "delta"
    files = f"read_parquet('{project}/batches/*/*.parquet', hive_partitioning = true)"
    assert row_multiset(warehouse, "main.v_batch_log") == row_multiset(
        warehouse, f"(SELECT id, batch FROM {files})"
    )
    with open_session(warehouse):
        pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_definitions(project, warehouse=warehouse)
    # Its partitions are not read as dates (W003: BIGINT -> DATE) when the definitions load.
    assert not [warning for warning in caught if "W003" in str(warning.message)]


def test_a_date_start_on_an_integer_column_is_e055_at_the_start_line(tmp_path):
    project, warehouse = _project(tmp_path, "2026-01-01")
    _write_batch(project, 1)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E055"
    assert "BIGINT" in caught.value.message and "an integer" in caught.value.message
    location = caught.value.location
    assert location is not None and (Path(location.file).name, location.line, location.column) == (
        "batches.strata",
        4,
        3,
    )


def test_an_integer_start_on_a_date_column_is_e055(tmp_path):
    project, warehouse = make_file_project(tmp_path)
    (project / "events.strata").write_text(
        (project / "events.strata").read_text().replace("start: 2026-03-01", "start: 20260301")
    )
    write_file_partition(project, 0, 3)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E055"
    assert "DATE" in caught.value.message and "a date" in caught.value.message


def test_a_start_that_is_neither_is_e007(tmp_path):
    project, warehouse = _project(tmp_path, "first")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E007"
    assert "an integer" in caught.value.message
