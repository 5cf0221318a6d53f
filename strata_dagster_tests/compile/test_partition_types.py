"""E050: partition columns with no total order are refused at compile time, with their type."""

import pytest

from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.helpers import compile_text

EVENTS = """
source events {
  path: 'events/*/*.parquet'
  partitioned_by: dt
  start: 2026-03-01
  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true
}
model copy_events {
  from events
}
"""


def _codes(text: str, schemas) -> list[str]:
    with pytest.raises(StrataError) as caught:
        compile_text(text, schemas=schemas, with_sources=False)
    return [error.code for error in caught.value.errors]


@pytest.mark.parametrize("type_name", ["DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "BIGINT", "INTEGER"])
def test_ordered_partition_column_of_business_versioned_source_compiles(type_name):
    # An integer column starts at an integer (a date there is E055: test_business_integer_start).
    text = (
        EVENTS
        if type_name.startswith(("DATE", "TIMESTAMP"))
        else EVENTS.replace("start: 2026-03-01", "start: 1")
    )
    compiled = compile_text(
        text, schemas={"events": (("id", "BIGINT"), ("dt", type_name))}, with_sources=False
    )
    assert "copy_events" in compiled.models


def test_string_partition_column_of_business_versioned_source_is_e050_with_its_type():
    with pytest.raises(StrataError) as caught:
        compile_text(EVENTS, schemas={"events": (("id", "BIGINT"), ("dt", "VARCHAR"))}, with_sources=False)
    assert caught.value.code == "E050"
    assert "VARCHAR" in caught.value.message and "events" in caught.value.message
    assert caught.value.location is not None and caught.value.location.line == 4


def test_time_partitioned_model_over_a_string_column_is_e050():
    module = """
source regions {
  table: raw.regions
}
model by_region {
  from regions
  group region
  aggregate n = count(*)
  partitioned_by: region
}
"""
    assert _codes(module, {"regions": (("region", "VARCHAR"), ("id", "BIGINT"))}) == ["E050"]


def test_time_partitioned_model_over_a_date_column_compiles():
    module = """
source regions {
  table: raw.regions
}
model by_day {
  from regions
  group signup
  aggregate n = count(*)
  partitioned_by: day(signup)
}
"""
    compiled = compile_text(module, schemas={"regions": (("signup", "DATE"),)}, with_sources=False)
    assert "by_day" in compiled.models


def test_a_hive_folder_column_typed_varchar_is_e050_when_the_project_runs(tmp_path):
    project = tmp_path / "project"
    for region in ("EU", "US"):
        folder = project / "events" / f"region={region}"
        folder.mkdir(parents=True)
        execute(
            tmp_path / "scratch.duckdb",
            f"COPY (SELECT 1 AS id) TO '{folder}/part-0.parquet' (FORMAT parquet)",
        )
    (project / "events.strata").write_text(EVENTS.replace("partitioned_by: dt", "partitioned_by: region"))
    with pytest.raises(StrataError) as caught:
        run_project(project, tmp_path / "w.duckdb")
    assert caught.value.code == "E050" and "VARCHAR" in caught.value.message
