"""A catalog's reading as text (engine.catalog_text): read back, it is the catalog read from the
warehouse, warnings included, for the same project files, branch, engine and format only."""

import pyarrow as pa

from strata_dagster.engine.catalog import read_catalog
from strata_dagster.engine.catalog_text import FORMAT, catalog_from_text, reading_text
from strata_dagster.engine.frames import FrameRequest, publish_frame
from strata_dagster.engine.run import run_project
from strata_dagster.errors import W_BOUNDS_UNREAD, W_REMOVED_MODEL
from strata_dagster.language import load_project
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
