"""The Dagster definitions on the Spark engine (issue 15 item 4): the same assets, data versions,
staleness, IO manager (frames in and out through Arrow), checks and backfill guard as on DuckDB,
with `build_definitions(..., engine="spark")`, on a real Dagster instance and a local Spark."""

import shutil

import dagster as dg
import duckdb
import polars as pl
import pytest

from strata_dagster import build_definitions, strata_python_model
from strata_dagster.backends.choice import backend_choice, using_backend
from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.opening import open_session
from strata_dagster_tests.orchestration.test_dagster_staleness import DIRECT_CONSUMERS_OF_ORDERS
from strata_dagster_tests.support.dagster_support import (
    DAYS,
    SHOP,
    START,
    UNPARTITIONED_MODELS,
    execute_assets,
    materializations,
    observe_sources,
    partition_ranges,
    stale_set,
)
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT
from strata_dagster_tests.support.engines_support import engine_under_test

pytestmark = pytest.mark.spark


@strata_python_model(unique=["region"], code_version="1")
def region_orders(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return orders_enriched.group_by("region").agg(orders=pl.len()).sort("region")


def _load(raw, spark) -> None:
    con = duckdb.connect(str(raw), read_only=True)
    spark.sql("CREATE DATABASE IF NOT EXISTS raw")
    for table in ("orders", "customers"):
        frame = spark.createDataFrame(con.sql(f"SELECT * FROM raw.{table}").to_arrow_table())
        frame.write.mode("overwrite").format("parquet").saveAsTable(f"raw.{table}")
    con.close()


def test_the_shop_materializes_goes_stale_and_loads_frames_on_spark(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "*.md", "*.py", "__pycache__"))
    raw = tmp_path / "sample.duckdb"
    write_sample_data(raw, 800, days=DAYS, start=START)
    with engine_under_test("spark", tmp_path) as engine, using_backend(backend_choice("spark")):
        _load(raw, engine.spark)
        defs = build_definitions(
            project, warehouse=engine.warehouse, engine="spark", python_assets=[region_orders]
        )
        instance = dg.DagsterInstance.ephemeral()
        observe_sources(defs, instance)
        result = execute_assets(defs, instance, UNPARTITIONED_MODELS)
        assert result.success
        (event,) = materializations(result, "stg_orders")
        with open_session(engine.warehouse, read_only=True) as session:
            record = session.history.snapshot(event.metadata["strata/snapshot"].value)
        assert event.tags["dagster/data_version"] == record.content_hash
        assert event.metadata["strata/path"].value == "full"
        daily, _ = partition_ranges(defs)
        assert execute_assets(
            defs, instance, ["daily_revenue"], partitions=daily, tags={"strata/reason": "first load"}
        ).success
        # A Python model reads a strata model as a polars frame and is stored as a snapshot.
        assert execute_assets(defs, instance, ["region_orders"]).success
        regions = engine.rows("SELECT region, orders FROM main.v_region_orders")
        expected = engine.rows("SELECT region, count(*) FROM main.v_orders_enriched GROUP BY region")
        assert sorted(regions) == sorted(expected)
        # A backfill run without a reason is refused before any step, on Spark too.
        refused = execute_assets(
            defs, instance, ["daily_revenue"], partitions=daily, tags={"dagster/backfill": "b1"}
        )
        assert not refused.success
        assert stale_set(defs, instance) == set()
        # One order changes: after observing the sources, exactly its downstream is stale.
        con = duckdb.connect(str(raw))
        changed = con.execute(
            "SELECT order_id, CAST(order_ts AS DATE) FROM raw.orders WHERE status = 'paid' LIMIT 1"
        ).fetchone()
        con.execute(
            f"UPDATE raw.orders SET amount = amount + 7, {ADVANCE_UPDATED_AT} WHERE order_id = ?",
            [changed[0]],
        )
        con.close()
        _load(raw, engine.spark)
        observe_sources(defs, instance)
        assert stale_set(defs, instance) == DIRECT_CONSUMERS_OF_ORDERS
        assert execute_assets(defs, instance, sorted(DIRECT_CONSUMERS_OF_ORDERS)).success
        day = changed[1].isoformat()
        assert stale_set(defs, instance) == {
            "orders_enriched",
            "order_tags",
            "order_timeline",
            f"daily_revenue[{day}]",
        }
