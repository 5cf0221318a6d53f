"""Dagster's staleness equals the engine's: a changed source row makes exactly its downstream
assets and partitions stale, wave by wave; materializing them leaves nothing stale; rematerializing
unchanged assets reuses snapshots and keeps their downstream fresh."""

from pathlib import Path

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.engine.reads.partition_status import model_partitions
from strata_dagster.language import load_project
from strata_dagster_tests.support.dagster_support import (
    UNPARTITIONED_MODELS,
    change_order,
    day_keys,
    execute_assets,
    materializations,
    materialized_shop,
    observe_sources,
    order_day,
    partition_ranges,
    stale_set,
)
from strata_dagster_tests.support.engine_support import edit_module, execute

DIRECT_CONSUMERS_OF_ORDERS = {"stg_orders", "order_status_log", "first_seen_orders"}


@pytest.fixture
def shop(tmp_path):
    return materialized_shop(tmp_path)


def paid_order(warehouse, offset=10):
    return execute(
        warehouse,
        "SELECT order_id FROM raw.orders WHERE status = 'paid' AND customer_id <= 40 ORDER BY order_id "
        "LIMIT 1 OFFSET ?",
        params=[offset],
    )[0][0]


def latest_versions(instance, name, partitions):
    versions = {}
    for partition in partitions:
        record = instance.get_latest_data_version_record(dg.AssetKey(name), partition_key=partition)
        versions[partition] = record.event_log_entry.asset_materialization.tags["dagster/data_version"]
    return versions


def test_materialized_project_is_fresh_and_rematerializing_reuses_every_snapshot(shop):
    project, warehouse, defs, instance = shop
    assert stale_set(defs, instance) == set()
    before = latest_versions(instance, "daily_revenue", day_keys())
    result = execute_assets(defs, instance, UNPARTITIONED_MODELS)
    assert result.success
    for name in UNPARTITIONED_MODELS:
        (event,) = materializations(result, name)
        assert event.metadata["strata/path"].value == "reused"
    daily, monthly = partition_ranges(defs)
    assert execute_assets(defs, instance, ["daily_revenue"], partitions=daily).success
    assert latest_versions(instance, "daily_revenue", day_keys()) == before
    assert stale_set(defs, instance) == set()


def test_a_changed_order_makes_exactly_its_downstream_stale_wave_by_wave(shop):
    project, warehouse, defs, instance = shop
    order = paid_order(warehouse)
    day = order_day(warehouse, order)
    month = day[:8] + "01"
    daily_before = latest_versions(instance, "daily_revenue", day_keys())
    change_order(warehouse, order)
    assert stale_set(defs, instance) == set()  # not observed yet: Dagster cannot know
    observe_sources(defs, instance)
    # Wave 1: the models that read `orders`.
    assert stale_set(defs, instance) == DIRECT_CONSUMERS_OF_ORDERS
    assert execute_assets(defs, instance, sorted(DIRECT_CONSUMERS_OF_ORDERS)).success
    # Wave 2: what reads stg_orders and order_status_log (first_seen_orders ignores updates: its
    # snapshot and data version stayed). daily_revenue reads the unpartitioned stg_orders per day
    # (through stg_orders__by_day): only the day whose rows changed is stale, as in the engine.
    wave2 = stale_set(defs, instance)
    assert wave2 == {"orders_enriched", "order_tags", "order_timeline", f"daily_revenue[{day}]"}
    assert execute_assets(defs, instance, ["orders_enriched", "order_tags", "order_timeline"]).success
    daily, monthly = partition_ranges(defs)
    assert execute_assets(defs, instance, ["daily_revenue"], partitions=daily).success
    # Only the changed day got a new data version: per-partition versions in one ranged run.
    daily_after = latest_versions(instance, "daily_revenue", day_keys())
    assert {key for key in day_keys() if daily_after[key] != daily_before[key]} == {day}
    # Wave 3: exactly the month of that day.
    assert stale_set(defs, instance) == {f"monthly_revenue[{month}]"}
    assert execute_assets(defs, instance, ["monthly_revenue"], partitions=month).success
    assert stale_set(defs, instance) == set()


def test_an_edit_that_does_not_advance_the_cdc_column_leaves_the_cdc_source_fresh(shop):
    """`orders` is `versioning: cdc(updated_at)`: its data version hashes `updated_at`, so by the cdc
    contract an in-place edit without it changes nothing in Dagster either."""
    project, warehouse, defs, instance = shop
    before = instance.get_latest_data_version_record(dg.AssetKey("orders"))
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1 WHERE order_id = ?",
        params=[paid_order(warehouse)],
    )
    observe_sources(defs, instance)
    after = instance.get_latest_data_version_record(dg.AssetKey("orders"))
    assert after.storage_id > before.storage_id  # observed again
    version = "dagster/data_version"
    assert after.event_log_entry.tags[version] == before.event_log_entry.tags[version]
    assert stale_set(defs, instance) == set()


def test_partition_versions_are_the_live_views_partition_contents(shop):
    project, warehouse, defs, instance = shop
    contents = model_partitions(load_project(project), warehouse, "daily_revenue", day_keys())
    versions = latest_versions(instance, "daily_revenue", day_keys())
    assert versions == {key: content.fingerprint for key, content in contents.items()}
    assert len(set(versions.values())) == len(versions)


def test_a_source_changed_behind_dagsters_back_is_recorded_when_a_model_reads_it(shop):
    project, warehouse, defs, instance = shop
    order = paid_order(warehouse, offset=3)
    change_order(warehouse, order)
    result = execute_assets(defs, instance, ["stg_orders"])
    assert result.success
    observed = [(event.asset_key, event.partition) for event in result.get_asset_observation_events()]
    day = order_day(warehouse, order)
    assert observed == [(dg.AssetKey("orders"), None), (dg.AssetKey("stg_orders__by_day"), day)]
    # Dagster now knows `orders` changed: its other consumers are stale. stg_orders is not: its
    # materialization records the version it was built from; what reads it is stale, as in the engine.
    assert stale_set(defs, instance) == {"order_status_log", "first_seen_orders"} | {
        "orders_enriched",
        "order_tags",
        f"daily_revenue[{day}]",
    }


def test_a_changed_model_is_stale_by_its_code_version_and_so_is_its_downstream(shop):
    project, warehouse, defs, instance = shop
    edit_module(project / "marts.strata", "active_days = count(*)", "active_days = count(*) + 0")
    # Built through the old definitions: the engine builds the new code, and says to reload.
    _, monthly = partition_ranges(defs)
    result = execute_assets(defs, instance, ["monthly_revenue"], partitions=monthly)
    assert result.success
    messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any("reload the code location" in message for message in messages)
    reloaded = build_definitions(project, warehouse=warehouse)
    assert stale_set(reloaded, instance) == {"monthly_revenue[2025-01-01]", "monthly_revenue[2025-02-01]"}
    _, monthly = partition_ranges(reloaded)
    assert execute_assets(reloaded, instance, ["monthly_revenue"], partitions=monthly).success
    assert stale_set(reloaded, instance) == set()


EVENTS_PROJECT = """
source events {
  table: raw.events
  partitioned_by: day(event_day)
  start: 2025-01-01
  description: 'Events, one partition per day.'
}

model daily_events {
  from events
  group event_day
  aggregate event_count = count(*), total = sum(amount)
  partitioned_by: day(event_day)
  description: 'Events per day.'
}

model monthly_events {
  from daily_events
  let event_month = cast(date_trunc('month', event_day) as date)
  group event_month
  aggregate total = sum(total)
  partitioned_by: month(event_month)
  description: 'Event totals per month.'
}

model event_kinds {
  from events
  group kind
  aggregate total = sum(amount)
  description: 'Unpartitioned: totals per kind over every day.'
}
"""


def make_events_project(root: Path, module: str = EVENTS_PROJECT) -> tuple[Path, Path]:
    """A project of `module` over 400 events across 40 days (2025-01-01 ..): (project, warehouse)."""
    project = root / "events"
    project.mkdir()
    (project / "events.strata").write_text(module)
    warehouse = root / "events.duckdb"
    execute(
        warehouse,
        "CREATE SCHEMA raw",
        "CREATE TABLE raw.events AS SELECT DATE '2025-01-01' + CAST(i % 40 AS INTEGER) AS event_day, "
        "CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END AS kind, CAST(i AS DECIMAL(12,2)) AS amount FROM range(400) t(i)",
    )
    return project, warehouse


@pytest.fixture
def events(tmp_path):
    project, warehouse = make_events_project(tmp_path)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    keys = day_keys()
    assert execute_assets(defs, instance, ["events"]).success
    assert execute_assets(defs, instance, ["event_kinds"]).success
    assert execute_assets(defs, instance, ["daily_events"], partitions=(keys[0], keys[-1])).success
    assert execute_assets(defs, instance, ["monthly_events"], partitions=("2025-01-01", "2025-02-01")).success
    return warehouse, defs, instance


def test_a_partitioned_source_makes_exactly_its_changed_partitions_stale(events):
    warehouse, defs, instance = events
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("events")).partitions_def.get_partition_keys() == day_keys()
    assert stale_set(defs, instance) == set()
    execute(
        warehouse,
        "UPDATE raw.events SET amount = amount + 1 WHERE event_day = DATE '2025-02-03' AND kind = 'a'",
    )
    assert execute_assets(defs, instance, ["events"]).success
    # The changed day, and the unpartitioned consumer through the source's `__whole` companion.
    assert stale_set(defs, instance) == {"daily_events[2025-02-03]", "event_kinds"}
    result = execute_assets(defs, instance, ["daily_events"], partitions="2025-02-03")
    (event,) = materializations(result, "daily_events")
    assert event.metadata["strata/partition_recomputed"].value is True
    assert execute_assets(defs, instance, ["event_kinds"]).success
    assert stale_set(defs, instance) == {"monthly_events[2025-02-01]"}
    assert execute_assets(defs, instance, ["monthly_events"], partitions="2025-02-01").success
    assert stale_set(defs, instance) == set()


def test_observing_the_whole_companion_observes_every_partition_too(events):
    warehouse, defs, instance = events
    execute(warehouse, "UPDATE raw.events SET amount = amount + 1 WHERE event_day = DATE '2025-01-05'")
    assert execute_assets(defs, instance, ["events__whole"]).success
    assert stale_set(defs, instance) == {"daily_events[2025-01-05]", "event_kinds"}
