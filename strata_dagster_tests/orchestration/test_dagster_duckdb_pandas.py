"""dagster-duckdb and dagster-pandas where Dagster users expect them: `StrataDuckDBResource` (a
`DuckDBResource`) gives users' own assets the live views through the serving copy, read-only,
never opening the warehouse (a run may be writing it); a Python model's pandas frame is checked
against its contract by dagster-pandas before anything is written."""

import subprocess
import sys

import dagster as dg
import pandas as pd
import polars as pl
import pytest
from dagster_duckdb import DuckDBResource

from strata_dagster import StrataDuckDBResource, build_definitions, strata_python_model
from strata_dagster_tests.support.dagster_support import (
    UNPARTITIONED_MODELS,
    execute_assets,
    make_small_shop,
    observe_sources,
)
from strata_dagster_tests.support.engine_support import execute, history_count

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)


# The example of docs/dagster.md ("Reading the live views from your own assets").
@dg.asset(deps=["orders_enriched"])
def orders_by_region(strata_duckdb: StrataDuckDBResource) -> dg.MaterializeResult:
    with strata_duckdb.get_connection() as con:
        rows = con.sql("SELECT region, count(*) FROM main.v_orders_enriched GROUP BY region").fetchall()
    return dg.MaterializeResult(metadata={"regions": len(rows), "orders": sum(n for _, n in rows)})


@strata_python_model(code_version="1", contract={"region": "VARCHAR not null", "orders": "BIGINT not null"})
def region_orders(orders_enriched: pd.DataFrame) -> pd.DataFrame:
    return orders_enriched.groupby("region", as_index=False).agg(orders=("order_id", "count"))


@strata_python_model(
    name="regions_without_counts", code_version="1", contract={"region": "VARCHAR", "orders": "BIGINT"}
)
def regions_without_counts(orders_enriched: pd.DataFrame) -> pd.DataFrame:
    return orders_enriched[["region"]].drop_duplicates()


@strata_python_model(name="null_regions", code_version="1", contract={"region": "VARCHAR not null"})
def null_regions(orders_enriched: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"region": [None, "north"]})


@strata_python_model(name="polars_regions", code_version="1", contract={"region": "VARCHAR not null"})
def polars_regions(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return orders_enriched.select("region").unique()


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    project, warehouse = make_small_shop(tmp_path_factory.mktemp("duckdb_pandas"))
    defs = build_definitions(
        project,
        warehouse=warehouse,
        python_assets=[orders_by_region, region_orders, regions_without_counts, null_regions, polars_regions],
    )
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, UNPARTITIONED_MODELS).success
    return project, warehouse, defs, instance


HOLD = (
    "import sys, time, duckdb; con = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(60)"
)


def test_a_users_asset_reads_the_live_views_while_another_process_holds_the_warehouse(shop):
    project, warehouse, defs, instance = shop
    assert isinstance(defs.resources["strata_duckdb"], DuckDBResource)
    live = execute(warehouse, "SELECT count(*) FROM main.v_orders_enriched")[0][0]
    # A writer holds the warehouse file: nothing else may open it, not even read-only.
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(warehouse)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = execute_assets(defs, instance, ["orders_by_region"])
    finally:
        holder.kill()
        holder.wait()
    assert result.success
    (event,) = result.asset_materializations_for_node("orders_by_region")
    assert event.metadata["orders"].value == live
    assert event.metadata["regions"].value > 1


def test_the_resource_never_opens_a_file_and_says_when_nothing_is_published(tmp_path):
    with pytest.raises(Exception, match="never opens a file"):
        StrataDuckDBResource(warehouse=str(tmp_path / "w.duckdb"), database=str(tmp_path / "w.duckdb"))
    unserved = StrataDuckDBResource(warehouse=str(tmp_path / "nothing.duckdb"))
    with pytest.raises(dg.Failure) as failure:
        with unserved.get_connection():
            pass
    assert failure.value.metadata["strata/error_code"].value == "E036"


def test_a_pandas_frame_that_fits_its_contract_is_published(shop):
    project, warehouse, defs, instance = shop
    assert execute_assets(defs, instance, ["region_orders"]).success
    total = execute(warehouse, "SELECT sum(orders) FROM main.v_region_orders")[0][0]
    assert total == execute(warehouse, "SELECT count(*) FROM main.v_orders_enriched")[0][0]


@pytest.mark.parametrize(
    ("name", "needle"),
    [("regions_without_counts", "orders"), ("null_regions", "region")],
    ids=["missing column", "null in a not-null column"],
)
def test_a_pandas_frame_that_breaks_its_contract_fails_its_type_check_before_any_write(shop, name, needle):
    project, warehouse, defs, instance = shop
    entries = history_count(warehouse)
    result = execute_assets(defs, instance, [name])
    assert not result.success
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    assert "DagsterTypeCheckDidNotPass" in failure.step_failure_data.error.cls_name
    assert needle in str(failure.step_failure_data.error)
    assert history_count(warehouse) == entries  # nothing written
    assert not execute(warehouse, f"SELECT * FROM duckdb_views() WHERE view_name = 'v_{name}'")


def test_a_polars_frame_passes_the_type_and_its_contract_is_checked_on_its_snapshot(shop):
    project, warehouse, defs, instance = shop
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("polars_regions")) is not None
    assert execute_assets(defs, instance, ["polars_regions"]).success
    assert execute(warehouse, "SELECT count(*) FROM main.v_polars_regions")[0][0] > 1
