"""A `materialize: view` model in Dagster: an asset like any other, materialized as a view snapshot,
stale when its source changes, with its readers."""

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster_tests.support.dagster_support import (
    change_order,
    execute_assets,
    make_small_shop,
    materializations,
    materialize_everything,
    observe_sources,
    order_day,
    stale_set,
)
from strata_dagster_tests.support.engine_support import edit_module, execute, snapshot_relations

STAGED = """  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  -- The delta is the rows whose `updated_at` passed the last build's watermark. Changed keys
  -- are taken before the filter, so an order that gets cancelled leaves this model too.
  cdc_column: updated_at
  -- Writers can commit a little late with an older updated_at: re-read ten minutes back.
  lateness: '10 minutes'
  unique: [order_id]
"""


def data_version(instance, name):
    record = instance.get_latest_data_version_record(dg.AssetKey(name))
    return record.event_log_entry.asset_materialization.tags["dagster/data_version"]


def test_a_view_model_is_an_asset_that_goes_stale_with_its_source(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    edit_module(project / "staging.strata", STAGED, "  materialize: view\n")
    (project / "tests.strata").unlink()  # its tests include an upsert step of stg_orders
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    materialize_everything(defs, instance)
    assert stale_set(defs, instance) == set()
    views = snapshot_relations(warehouse, ("view",))
    assert len(views) == 1 and views[0].endswith("_stg_orders")
    version = data_version(instance, "stg_orders")
    change_order(warehouse, 7)
    observe_sources(defs, instance)
    assert "stg_orders" in stale_set(defs, instance)
    result = execute_assets(defs, instance, ["stg_orders"])
    assert result.success
    [materialization] = materializations(result, "stg_orders")
    assert materialization.metadata["strata/path"].value == "view"
    latest = instance.get_latest_data_version_record(dg.AssetKey("stg_orders"))
    metadata = latest.event_log_entry.asset_materialization.metadata
    assert metadata["strata/path"].value == "view"
    assert "strata/rows" not in metadata and "dagster/row_count" not in metadata  # never counted
    assert data_version(instance, "stg_orders") != version
    # Its new identity makes its readers stale, the day of the changed order only.
    stale = stale_set(defs, instance)
    assert {"orders_enriched", f"daily_revenue[{order_day(warehouse, 7)}]"} <= stale
    assert not any(
        name.startswith("daily_revenue[") and name != f"daily_revenue[{order_day(warehouse, 7)}]"
        for name in stale
    )
    assert execute_assets(defs, instance, ["orders_enriched"]).success
    assert execute(warehouse, "SELECT amount FROM main.v_orders_enriched WHERE order_id = 7") == [
        (execute(warehouse, "SELECT amount FROM raw.orders WHERE order_id = 7")[0][0],)
    ]
