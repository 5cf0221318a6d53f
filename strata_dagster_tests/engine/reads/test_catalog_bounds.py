"""W003: the partitions of a model whose rows cannot be read are a warning where the Dagster
code location loads, not a silent fallback to today's partition."""

import warnings

import pyarrow as pa

from strata_dagster.engine.commands.frames import FrameRequest, publish_frame
from strata_dagster.engine.reads.catalog import read_catalog
from strata_dagster.engine.run import run_project
from strata_dagster.errors import W_BOUNDS_UNREAD, W_REMOVED_MODEL
from strata_dagster.orchestration import build_definitions
from strata_dagster_tests.support.engine_support import make_module_project, sql

MODULE = """
source orders {
  table: raw.orders
}
model daily {
  from orders
  let day = cast(day_text as date)
  group day
  aggregate n = count(*)
  partitioned_by: day(day)
}
"""


def project_with(tmp_path, *values: str):
    rows = ", ".join(f"('{value}')" for value in values)
    return make_module_project(
        tmp_path,
        "m.strata",
        MODULE,
        f"CREATE TABLE raw.orders AS SELECT * FROM (VALUES {rows}) AS t(day_text)",
    )


def test_readable_partitions_give_bounds_and_no_warning(tmp_path):
    project, warehouse = project_with(tmp_path, "2026-01-02", "2026-01-05")
    catalog = read_catalog(project, warehouse)
    assert str(catalog.bounds["daily"].first) == "2026-01-02"
    assert catalog.warnings == ()


def test_rows_that_cannot_be_read_are_w003_naming_the_model_and_the_error(tmp_path):
    project, warehouse = project_with(tmp_path, "2026-01-02", "not a date")
    catalog = read_catalog(project, warehouse)
    assert catalog.bounds["daily"] is None
    [warning] = catalog.warnings
    assert warning.code == W_BOUNDS_UNREAD
    assert "model `daily`" in warning.message and "not a date" in warning.message
    assert warning.location is not None and warning.location.line == 5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_definitions(project, warehouse=warehouse)
    assert any("warning[W003]" in str(item.message) for item in caught)
    sql(warehouse, "UPDATE raw.orders SET day_text = '2026-01-03' WHERE day_text = 'not a date'")
    assert read_catalog(project, warehouse).warnings == ()


def test_a_removed_models_live_view_is_w004_where_the_definitions_load(tmp_path):
    """A model deleted from the project keeps its view: the code location's load names it; a Python
    model's view (not in the project) is no such view."""
    project, warehouse = project_with(tmp_path, "2026-01-02")
    (project / "extra.strata").write_text("model gone {\n  from orders\n}\n")
    run_project(project, warehouse)
    publish_frame(FrameRequest(warehouse, "frame_model", pa.table({"x": [1]}), code_version="1"))
    (project / "extra.strata").unlink()
    [warning] = read_catalog(project, warehouse).warnings
    assert warning.code == W_REMOVED_MODEL
    assert "`main.v_gone`" in warning.message and "frame_model" not in warning.message
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_definitions(project, warehouse=warehouse)
    assert any("warning[W004]" in str(item.message) for item in caught)
