"""A code location's reading of the warehouse, handed to its runs (orchestration.reconstruction).

Dagster loads the definitions in its code server and again in every run's worker. The worker
declares the project from the code server's reading (Dagster's reconstruction metadata) instead of
opening the warehouse, as long as the project's files are the ones it was read with; a changed
file is read again, so code versions are always the files'."""

import shutil
import sys

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.code_pointer import FileCodePointer
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext
from dagster._core.definitions.reconstruct import (
    initialize_repository_def_from_pointer,
    reconstruct_repository_def_from_pointer,
)

from strata_dagster.engine.catalog import read_catalog
from strata_dagster.engine.catalog_text import FORMAT, catalog_from_text, reading_text
from strata_dagster.engine.frames import FrameRequest, publish_frame
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_WAREHOUSE, W_BOUNDS_UNREAD, W_REMOVED_MODEL, StrataError
from strata_dagster.language import load_project
from strata_dagster.orchestration.reconstruction import KEY_PREFIX
from strata_dagster_tests.dagster_support import make_small_shop
from strata_dagster_tests.engine_support import edit_module, make_module_project, sql

CATALOG_FIELDS = (
    "branch",
    "fingerprints",
    "sql",
    "bounds",
    "partition_inputs",
    "columns",
    "lineage",
    "arrivals",
    "warnings",
)
DEFINITIONS = """
from pathlib import Path

from strata_dagster import build_definitions

HERE = Path(__file__).resolve().parent
defs = build_definitions(HERE / "shop", warehouse=HERE / "warehouse.duckdb")
"""


def assert_same_catalog(found, expected) -> None:
    assert found is not None
    for name in CATALOG_FIELDS:
        assert getattr(found, name) == getattr(expected, name), name


def test_the_shops_catalog_from_its_reading_is_the_catalog_read_from_the_warehouse(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    for built in (False, True):
        if built:
            run_project(project, warehouse)
        catalog = read_catalog(project, warehouse)
        assert catalog.bounds and catalog.columns and catalog.lineage and catalog.partition_inputs
        text = reading_text(catalog)
        assert text is not None
        assert_same_catalog(catalog_from_text(text, load_project(project), "duckdb"), catalog)


def test_a_reading_with_warnings_gives_them_again(tmp_path):
    """Bounds that cannot be read (W003) and a removed model's live view (W004) are part of what
    was read: the catalog from the reading warns as the code location's load did."""
    module = (
        "source orders {\n  table: raw.orders\n}\n"
        "model daily {\n  from orders\n  let day = cast(day_text as date)\n  group day\n"
        "  aggregate n = count(*)\n  partitioned_by: day(day)\n}\n"
    )
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        module,
        "CREATE TABLE raw.orders AS SELECT * FROM (VALUES ('2026-01-02')) t(day_text)",
    )
    (project / "extra.strata").write_text("model gone {\n  from orders\n}\n")
    run_project(project, warehouse)
    publish_frame(FrameRequest(warehouse, "frame_model", pa.table({"x": [1]}), code_version="1"))
    (project / "extra.strata").unlink()
    sql(warehouse, "INSERT INTO raw.orders VALUES ('not a date')")
    catalog = read_catalog(project, warehouse)
    assert {warning.code for warning in catalog.warnings} == {W_BOUNDS_UNREAD, W_REMOVED_MODEL}
    found = catalog_from_text(reading_text(catalog), load_project(project), "duckdb")
    assert_same_catalog(found, catalog)


def test_a_reading_is_refused_for_other_files_another_branch_or_engine_or_format(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    catalog = read_catalog(project, warehouse)
    text = reading_text(catalog)
    assert catalog_from_text(text, load_project(project), "duckdb") is not None
    assert catalog_from_text(text, load_project(project), "duckdb", branch="dev") is None
    assert catalog_from_text(text, load_project(project), "spark") is None
    older = text.replace(f'"format": {FORMAT}', f'"format": {FORMAT - 1}')
    assert older != text and catalog_from_text(older, load_project(project), "duckdb") is None
    assert catalog_from_text("not json", load_project(project), "duckdb") is None
    assert catalog_from_text('{"format": 1}', load_project(project), "duckdb") is None
    edit_module(project / "marts.strata", "sum(amount)", "sum(amount) + 0")
    assert catalog_from_text(text, load_project(project), "duckdb") is None


MODULE = "strata_reconstruction_defs"


@pytest.fixture
def load_context_restored():
    """Dagster's load functions set its process-wide load context: put back what was there."""
    before = DefinitionsLoadContext._instance
    try:
        yield
    finally:
        DefinitionsLoadContext._instance = before
        sys.modules.pop(MODULE, None)


def _loaded(load, pointer, *args):
    """A load of the definitions as a new process makes it: Dagster keeps a module it imported
    from a file, and would not run the file again."""
    sys.modules.pop(MODULE, None)
    return load(pointer, *args)


def _code_versions(repository) -> dict[str, str | None]:
    graph = repository.asset_graph
    return {key.to_user_string(): graph.get(key).code_version for key in graph.materializable_asset_keys}


def _text(repository, key: str) -> str:
    value = repository.repository_load_data.reconstruction_metadata[key]
    return getattr(value, "data", value)  # Dagster wraps what the code location's load recorded


def _daily_keys(repository) -> list[str]:
    return repository.asset_graph.get(dg.AssetKey("daily_revenue")).partitions_def.get_partition_keys()


def test_a_runs_load_declares_the_project_from_the_code_locations_reading(tmp_path, load_context_restored):
    project, warehouse = make_small_shop(tmp_path)
    (tmp_path / f"{MODULE}.py").write_text(DEFINITIONS)
    pointer = FileCodePointer(str(tmp_path / f"{MODULE}.py"), "defs", str(tmp_path))

    # The code location's load reads the warehouse and records its reading for the runs.
    loaded = _loaded(initialize_repository_def_from_pointer, pointer)
    load_data = loaded.repository_load_data
    assert load_data is not None
    [key] = [key for key in load_data.reconstruction_metadata if key.startswith(KEY_PREFIX)]

    # A run's load with that data does not open the warehouse: it loads with the file gone.
    shutil.move(warehouse, tmp_path / "elsewhere.duckdb")
    run_load = _loaded(reconstruct_repository_def_from_pointer, pointer, load_data)
    assert _code_versions(run_load) == _code_versions(loaded)
    assert _daily_keys(run_load) == _daily_keys(loaded)
    # ... and hands the same reading on (to the runs a run launches: strata_materialize_all's waves).
    assert _text(run_load, key) == _text(loaded, key)

    # A project file changed since the code location loaded: the run reads it and the warehouse.
    edit_module(project / "marts.strata", "sum(amount)", "sum(amount) + 0")
    with pytest.raises(StrataError) as refused:
        _loaded(reconstruct_repository_def_from_pointer, pointer, load_data)
    assert refused.value.code == E_WAREHOUSE
    shutil.move(tmp_path / "elsewhere.duckdb", warehouse)
    changed = _loaded(reconstruct_repository_def_from_pointer, pointer, load_data)
    versions, before = _code_versions(changed), _code_versions(loaded)
    assert versions["daily_revenue"] != before["daily_revenue"]
    assert versions["stg_orders"] == before["stg_orders"]
