"""A day-partitioned model over an unpartitioned one (daily_revenue `from stg_orders`) is stale in
Dagster exactly where the engine rebuilds: in the days whose stg_orders rows changed, read through
the partitions companion stg_orders__by_day, whose per-day data versions are the figures the
engine compares."""

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.reads.partition_status import input_partitions
from strata_dagster.engine.run import run_project
from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    UNPARTITIONED_MODELS,
    change_order,
    day_keys,
    execute_assets,
    graphql_in_process,
    make_small_shop,
    materializations,
    materialize_everything,
    materialized_shop,
    observe_sources,
    order_day,
    stale_set,
)
from strata_dagster_tests.support.engine_support import execute

COMPANION = dg.AssetKey("stg_orders__by_day")


@pytest.fixture
def shop(tmp_path):
    return materialized_shop(tmp_path)


def partitioned(stale: set[str]) -> set[str]:
    return {name for name in stale if "[" in name}


def companion_observations(result) -> list[str]:
    return sorted(
        event.partition for event in result.get_asset_observation_events() if event.asset_key == COMPANION
    )


def companion_versions(instance) -> dict[str, str]:
    tags = instance.event_log_storage.get_latest_tags_by_partition(
        COMPANION, dg.DagsterEventType.ASSET_OBSERVATION, ["dagster/data_version"]
    )
    return {key: value["dagster/data_version"] for key, value in tags.items()}


def engine_figures(warehouse) -> dict[str, list]:
    """What daily_revenue's live snapshot recorded of stg_orders's rows per day, for its next build."""
    with open_session(warehouse, read_only=True) as session:
        head = session.history.pointers("main")["daily_revenue"][-1]
        return session.history.snapshot(head).detail["partition_fingerprints"]


def move_order(warehouse, days: int) -> tuple[str, str]:
    """Move a paid order of mid-January `days` later, as its writer would; its old and new day."""
    order = execute(
        warehouse,
        "SELECT order_id FROM raw.orders WHERE status = 'paid' AND CAST(order_ts AS DATE) "
        "BETWEEN DATE '2025-01-15' AND DATE '2025-01-19' ORDER BY order_id LIMIT 1",
    )[0][0]
    before = order_day(warehouse, order)
    execute(
        warehouse,
        "UPDATE raw.orders SET order_ts = order_ts + to_days(CAST(? AS INTEGER)), "
        "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND WHERE order_id = ?",
        params=[days, order],
    )
    return before, order_day(warehouse, order)


def test_an_order_moved_to_another_month_makes_exactly_its_two_days_then_their_two_months_stale(shop):
    project, warehouse, defs, instance = shop
    first, second = move_order(warehouse, 20)
    assert (first[:7], second[:7]) == ("2025-01", "2025-02")
    observe_sources(defs, instance)
    result = execute_assets(defs, instance, ["stg_orders"])
    assert result.success
    # stg_orders's build observed the two days whose rows changed, and no other.
    assert companion_observations(result) == [first, second]
    assert partitioned(stale_set(defs, instance)) == {f"daily_revenue[{first}]", f"daily_revenue[{second}]"}
    # One ranged run over the days between: the engine recomputes the two days, the others keep
    # their snapshots and data versions.
    result = execute_assets(defs, instance, ["daily_revenue"], partitions=(first, second))
    assert result.success
    recomputed = {
        event.partition
        for event in materializations(result, "daily_revenue")
        if event.metadata["strata/partition_recomputed"].value
    }
    assert recomputed == {first, second}
    assert partitioned(stale_set(defs, instance)) == {
        "monthly_revenue[2025-01-01]",
        "monthly_revenue[2025-02-01]",
    }
    assert execute_assets(
        defs, instance, ["monthly_revenue"], partitions=("2025-01-01", "2025-02-01")
    ).success
    assert execute_assets(defs, instance, UNPARTITIONED_MODELS).success
    assert stale_set(defs, instance) == set()
    # The companion's versions are the content of stg_orders's rows per day, from the figures the
    # engine recorded for daily_revenue's next build.
    contents = input_partitions(project, warehouse, "daily_revenue", day_keys())
    assert companion_versions(instance) == {key: content.fingerprint for key, content in contents.items()}
    assert engine_figures(warehouse) == {
        key: [content.row_count, content.row_hash_sum] for key, content in contents.items()
    }


def test_a_day_built_before_stg_orders_records_what_the_engine_rebuilt_on_the_way(shop):
    project, warehouse, defs, instance = shop
    order = paid_order(warehouse, offset=5)
    day = order_day(warehouse, order)
    change_order(warehouse, order)
    observe_sources(defs, instance)
    # The engine rebuilds stg_orders first (it never reads outdated rows); daily_revenue's step
    # records the changed day of the companion before its own materialization.
    result = execute_assets(defs, instance, ["daily_revenue"], partitions=day)
    assert result.success
    assert companion_observations(result) == [day]
    stale = stale_set(defs, instance)
    assert f"daily_revenue[{day}]" not in stale
    assert partitioned(stale) == {f"monthly_revenue[{day[:8]}01]"}
    # Materializing stg_orders in Dagster reuses the engine's snapshot: no day changed again.
    result = execute_assets(defs, instance, ["stg_orders"])
    (event,) = materializations(result, "stg_orders")
    assert event.metadata["strata/path"].value == "reused"
    assert companion_observations(result) == []
    assert partitioned(stale_set(defs, instance)) == {f"monthly_revenue[{day[:8]}01]"}


SALES_PROJECT = """
source sales {
  table: raw.sales
  description: 'Sales, one row each, not partitioned.'
}

model daily_sales {
  from sales
  filter amount > 0
  group sale_day
  aggregate total = sum(amount), sale_count = count(*)
  partitioned_by: day(sale_day)
  description: 'Sales per day.'
}
"""


def test_a_day_partitioned_model_over_an_unpartitioned_source_is_stale_in_the_changed_day_only(tmp_path):
    project = tmp_path / "sales"
    project.mkdir()
    (project / "sales.strata").write_text(SALES_PROJECT)
    warehouse = tmp_path / "sales.duckdb"
    execute(
        warehouse,
        "CREATE SCHEMA raw",
        "CREATE TABLE raw.sales AS SELECT i AS sale_id, DATE '2025-01-01' + CAST(i % 40 AS INTEGER) AS sale_day, "
        "CAST(i AS DECIMAL(12,2)) AS amount FROM range(400) t(i)",
    )
    defs = build_definitions(project, warehouse=warehouse)
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("daily_sales")).parent_keys == {dg.AssetKey("sales__by_day")}
    assert graph.get(dg.AssetKey("sales__by_day")).parent_keys == {dg.AssetKey("sales")}
    instance = dg.DagsterInstance.ephemeral()
    result = execute_assets(defs, instance, ["sales"])
    observed = [event.partition for event in result.get_asset_observation_events()]
    assert sorted(key for key in observed if key) == day_keys()  # the first observation: every day
    assert execute_assets(defs, instance, ["daily_sales"], partitions=(day_keys()[0], day_keys()[-1])).success
    assert stale_set(defs, instance) == set()
    # A row filtered out before and after still changes its day's input rows: the engine recomputes
    # that day, and Dagster shows it stale.
    execute(warehouse, "UPDATE raw.sales SET amount = -1 WHERE sale_id IN (0, 5)")
    result = execute_assets(defs, instance, ["sales"])
    assert sorted(event.partition for event in result.get_asset_observation_events() if event.partition) == [
        "2025-01-01",
        "2025-01-06",
    ]
    assert stale_set(defs, instance) == {"daily_sales[2025-01-01]", "daily_sales[2025-01-06]"}
    result = execute_assets(defs, instance, ["daily_sales"], partitions=("2025-01-01", "2025-01-06"))
    recomputed = {
        event.partition
        for event in materializations(result, "daily_sales")
        if event.metadata["strata/partition_recomputed"].value
    }
    assert recomputed == {"2025-01-01", "2025-01-06"}
    assert stale_set(defs, instance) == set()


COMPANION_NODE = (
    "query($k: [AssetKeyInput!]) { assetNodes(assetKeys: $k) { isObservable isMaterializable "
    "isPartitioned assetObservations(limit: 1) { timestamp } partitionKeysByDimension { partitionKeys } } }"
)
OBSERVED_PARTITIONS = (
    "query($k: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $k) { ... on Asset { "
    "assetObservations(partitions: $p) { partition } } } }"
)


PARTITION_STATS = """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
  partitionStats { numMaterialized numPartitions numFailed numMaterializing } } } }"""


def test_the_ui_shows_the_companion_observed_after_the_first_builds_not_missing(tmp_path):
    """The UI's graph shows an observable asset by its last observation ("Observed"); its
    Partitions tab and its lineage node's fill count materialized partitions only, so each changed
    day of the companion is recorded as a materialization too: after the first builds every day is
    observed and none reads "Missing" (was "Missing (40)", "0% filled")."""
    project, warehouse = make_small_shop(tmp_path)
    with (
        dg.instance_for_test() as instance,
        graphql_in_process(project, warehouse, instance, tmp_path) as query,
    ):
        materialize_everything(build_definitions(project, warehouse=warehouse), instance)
        (node,) = query(COMPANION_NODE, k=[{"path": COMPANION.path}])["assetNodes"]
        assert (node["isObservable"], node["isMaterializable"], node["isPartitioned"]) == (True, False, True)
        assert node["assetObservations"], "the graph would show it 'Never observed'"
        keys = node["partitionKeysByDimension"][0]["partitionKeys"]
        assert keys == day_keys()
        observed = query(OBSERVED_PARTITIONS, k={"path": COMPANION.path}, p=keys)["assetOrError"]
        assert {event["partition"] for event in observed["assetObservations"]} == set(keys)
        stats = query(PARTITION_STATS, k={"path": COMPANION.path})["assetNodeOrError"]["partitionStats"]
        assert stats == {"numMaterialized": 40, "numPartitions": 40, "numFailed": 0, "numMaterializing": 0}


def test_observing_the_companion_itself_records_only_changed_days_in_the_duckdb_pool(shop):
    project, warehouse, defs, instance = shop
    assets_def = defs.resolve_asset_graph().assets_def_for_key(COMPANION)
    assert assets_def.op.pool == "duckdb"
    result = execute_assets(defs, instance, [COMPANION.to_user_string()])
    assert result.success and companion_observations(result) == []
    # A day whose rows changed behind Dagster's back (a build outside Dagster) is recorded.
    order = paid_order(warehouse)
    change_order(warehouse, order)
    run_project(project, warehouse, models=["stg_orders"])
    result = execute_assets(defs, instance, [COMPANION.to_user_string()])
    assert result.success and companion_observations(result) == [order_day(warehouse, order)]
    assert f"daily_revenue[{order_day(warehouse, order)}]" in stale_set(defs, instance)
