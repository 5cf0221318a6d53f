"""The StrataIOManager: SQL builds and Python frames become snapshots with pins and metadata;
models load into Python consumers as polars or pandas frames, partition by partition."""

import dagster as dg
import pandas as pd
import polars as pl
import pytest

from strata_dagster import build_definitions, strata_python_model
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.dagster_support import (
    UNPARTITIONED_MODELS,
    execute_assets,
    make_small_shop,
    materializations,
    observe_sources,
    partition_ranges,
)
from strata_dagster_tests.support.engine_support import execute, history_count

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)


@strata_python_model(unique=["region"], code_version="1", contract={"region": "VARCHAR not null"})
def region_summary(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return (
        orders_enriched.group_by("region").agg(orders=pl.len(), revenue=pl.col("amount").sum()).sort("region")
    )


@strata_python_model(code_version="1")
def segment_counts(orders_enriched: pd.DataFrame) -> pd.DataFrame:
    assert isinstance(orders_enriched, pd.DataFrame)
    return orders_enriched.groupby("segment", as_index=False).agg(orders=("order_id", "count"))


@strata_python_model(name="duplicated_regions", unique=["region"], code_version="1")
def duplicated_regions(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return orders_enriched.select("region")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    project, warehouse = make_small_shop(tmp_path_factory.mktemp("io"))
    defs = build_definitions(
        project, warehouse=warehouse, python_assets=[region_summary, segment_counts, duplicated_regions]
    )
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, UNPARTITIONED_MODELS).success
    return project, warehouse, defs, instance


def test_a_sql_materialization_carries_the_engine_run_snapshot_path_rows_and_sql(shop):
    project, warehouse, defs, instance = shop
    record = instance.get_latest_data_version_record(dg.AssetKey("orders_enriched"))
    event = record.event_log_entry.asset_materialization
    metadata = {key: getattr(value, "value", value) for key, value in event.metadata.items()}
    for key in (
        "strata/run_id",
        "strata/snapshot",
        "strata/path",
        "strata/rows",
        "strata/duration_ms",
        "strata/sql",
    ):
        assert key in metadata
    assert metadata["strata/path"] == "full"
    live = execute(warehouse, "SELECT count(*) FROM main.v_orders_enriched")[0][0]
    assert metadata["strata/rows"] == metadata["dagster/row_count"] == live
    content = execute(
        warehouse,
        "SELECT content_hash FROM strata.snapshots WHERE snapshot_id = ?",
        params=[metadata["strata/snapshot"]],
    )[0][0]
    assert event.tags["dagster/data_version"] == content
    assert "FROM" in metadata["strata/sql"]


def test_a_python_model_becomes_a_snapshot_and_an_unchanged_frame_keeps_it(shop):
    project, warehouse, defs, instance = shop
    first = execute_assets(defs, instance, ["region_summary"])
    assert first.success
    (event,) = materializations(first, "region_summary")
    assert event.metadata["strata/path"].value == "full"
    rows = execute(warehouse, "SELECT region, orders FROM main.v_region_summary ORDER BY region")
    expected = execute(
        warehouse, "SELECT region, count(*) FROM main.v_orders_enriched GROUP BY region ORDER BY region"
    )
    assert rows == expected
    entries = history_count(warehouse)
    again = execute_assets(defs, instance, ["region_summary"])
    (second,) = materializations(again, "region_summary")
    assert second.metadata["strata/path"].value == "cutoff"
    assert second.tags["dagster/data_version"] == event.tags["dagster/data_version"]
    assert history_count(warehouse) == entries  # nothing written


def test_a_pandas_consumer_gets_a_pandas_frame(shop):
    project, warehouse, defs, instance = shop
    assert execute_assets(defs, instance, ["segment_counts"]).success
    total = execute(warehouse, "SELECT sum(orders) FROM main.v_segment_counts")[0][0]
    assert total == execute(warehouse, "SELECT count(*) FROM main.v_orders_enriched")[0][0]


def test_a_python_model_that_breaks_its_pin_publishes_nothing(shop):
    project, warehouse, defs, instance = shop
    entries = history_count(warehouse)
    result = execute_assets(defs, instance, ["duplicated_regions"])
    assert not result.success
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    assert "E030" in str(failure.step_failure_data.error)
    assert history_count(warehouse) == entries
    assert not execute(warehouse, "SELECT * FROM duckdb_views() WHERE view_name = 'v_duplicated_regions'")


def test_a_python_model_cannot_take_a_strata_models_name(shop, tmp_path):
    project, warehouse, defs, instance = shop

    @strata_python_model(name="stg_orders")
    def clash() -> pl.DataFrame:
        return pl.DataFrame({"x": [1]})

    clashing = build_definitions(project, warehouse=warehouse, python_assets=[clash])
    assert not dg.materialize([clash], resources=clashing.resources, raise_on_error=False).success


RANGE_TAGS = {
    "dagster/asset_partition_range_start": "2025-01-03",
    "dagster/asset_partition_range_end": "2025-01-05",
}


@pytest.mark.parametrize(
    ("run", "days"),
    [
        ({"partition_key": "2025-01-07"}, ("2025-01-07",)),
        ({"tags": RANGE_TAGS}, ("2025-01-03", "2025-01-04", "2025-01-05")),  # a single-run backfill
    ],
    ids=["one partition", "a partition range"],
)
def test_a_partitioned_consumer_loads_only_its_partitions_rows(shop, run, days):
    project, warehouse, defs, instance = shop
    daily, _ = partition_ranges(defs)
    assert execute_assets(defs, instance, ["daily_revenue"], partitions=daily).success
    partitions_def = defs.resolve_asset_graph().get(dg.AssetKey("daily_revenue")).partitions_def
    seen = {}

    @dg.asset(partitions_def=partitions_def, backfill_policy=dg.BackfillPolicy.single_run())
    def day_report(context: dg.AssetExecutionContext, daily_revenue: pl.DataFrame) -> None:
        seen[tuple(context.partition_keys)] = daily_revenue

    consumer = build_definitions(project, warehouse=warehouse, python_assets=[day_report])
    job = consumer.resolve_implicit_job_def_def_for_assets([dg.AssetKey("day_report")])
    assert job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey("day_report")], **run
    ).success
    ((keys, frame),) = seen.items()
    assert keys == days
    assert isinstance(frame, pl.DataFrame) and frame.height > 0
    assert set(frame["order_day"].cast(pl.Utf8)) == set(days)
    expected = execute(
        warehouse,
        "SELECT count(*) FROM main.v_daily_revenue WHERE order_day BETWEEN CAST(? AS DATE) AND CAST(? AS DATE)",
        params=[days[0], days[-1]],
    )
    assert frame.height == expected[0][0]


def test_a_named_projects_python_model_names_its_project(shop):
    """A Python model publishes through its project's IO manager: in a project given a `name`, it
    says which (`strata_python_model(project=...)`), else the load fails with E067 saying so."""
    project, warehouse, _, _ = shop

    @strata_python_model(name="named_regions", code_version="1", project="sales")
    def named(orders_enriched: pl.DataFrame) -> pl.DataFrame:
        return orders_enriched.select("region").unique()

    defs = build_definitions(project, warehouse=warehouse, name="sales", python_assets=[named])
    assert defs.resolve_asset_graph().get(dg.AssetKey("named_regions")) is not None
    assert "strata_sales_io_manager" in defs.resources
    with pytest.raises(StrataError) as caught:
        build_definitions(project, warehouse=warehouse, name="returns", python_assets=[named])
    assert caught.value.code == "E067" and "project='returns'" in (caught.value.hint or "")
