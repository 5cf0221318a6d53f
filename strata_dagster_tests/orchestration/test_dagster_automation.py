"""The strata automation condition requests exactly the stale asset partitions, upstream first,
whether or not it was evaluated before the change; the sensor ships stopped."""

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    change_order,
    execute_assets,
    materialized_shop,
    observe_sources,
    order_day,
    stale_set,
)
from strata_dagster_tests.support.engine_support import edit_module


def requested(result, defs) -> set[str]:
    names = set()
    for key in defs.resolve_asset_graph().materializable_asset_keys:
        for partition in result.get_requested_partitions(key):
            names.add(key.to_user_string() if partition is None else f"{key.to_user_string()}[{partition}]")
    return names


def execute_requested(defs, instance, names: set[str]) -> None:
    """Run what the sensor would launch: unpartitioned assets together, each partitioned asset as
    one ranged run over its requested partitions."""
    plain = sorted(name for name in names if "[" not in name)
    if plain:
        assert execute_assets(defs, instance, plain).success
    partitioned: dict[str, list[str]] = {}
    for name in names - set(plain):
        asset, partition = name[:-1].split("[")
        partitioned.setdefault(asset, []).append(partition)
    for asset in ("daily_revenue", "monthly_revenue"):
        if asset in partitioned:
            keys = sorted(partitioned[asset])
            assert execute_assets(defs, instance, [asset], partitions=(keys[0], keys[-1])).success


@pytest.fixture
def shop(tmp_path):
    return materialized_shop(tmp_path)


def test_the_condition_requests_exactly_the_stale_partitions_wave_by_wave_until_fresh(shop):
    project, warehouse, defs, instance = shop
    nothing = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert requested(nothing, defs) == set()
    order = paid_order(warehouse)
    change_order(warehouse, order)
    observe_sources(defs, instance)
    waves = []
    cursor = nothing.cursor
    for _ in range(6):
        stale = stale_set(defs, instance)
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        cursor = result.cursor
        wave = requested(result, defs)
        assert wave == stale  # exactly what Dagster shows stale, nothing more
        if not wave:
            break
        waves.append(wave)
        execute_requested(defs, instance, wave)
    assert stale_set(defs, instance) == set()
    month = order_day(warehouse, order)[:8] + "01"
    assert waves[0] == {"stg_orders", "order_status_log", "first_seen_orders"}
    assert waves[-1] == {f"monthly_revenue[{month}]"}
    assert len(waves) == 3


def test_a_stale_child_waits_for_its_stale_parent(shop):
    project, warehouse, defs, instance = shop
    # A new code version for stg_orders makes it and (through the fingerprint) all it feeds stale.
    edit_module(
        project / "staging.strata",
        "filter status <> 'cancelled'",
        "filter status not in ('cancelled', 'void')",
    )
    reloaded = build_definitions(project, warehouse=warehouse)
    stale = stale_set(reloaded, instance)
    assert {"stg_orders", "orders_enriched", "order_tags"} <= stale
    wave = requested(dg.evaluate_automation_conditions(defs=reloaded, instance=instance), reloaded)
    # daily_revenue waits too, though it reads stg_orders through stg_orders__by_day.
    assert wave == {"stg_orders"}
    # So does the stale sensor (the sources are unchanged since observed: nothing to observe first).
    sensor = reloaded.resolve_sensor_def("strata_materialize_stale")
    context = dg.build_sensor_context(instance=instance, repository_def=reloaded.get_repository_def())
    runs = sensor.evaluate_tick(context).run_requests
    assert [sorted(key.to_user_string() for key in run.asset_selection) for run in runs] == [["stg_orders"]]


def run_sensor_requests(defs, instance, requests) -> set[str]:
    """Execute a tick's run requests in process; return what they materialized or observed."""
    done = set()
    for request in requests:
        names = [key.to_user_string() for key in request.asset_selection]
        start = request.tags.get("dagster/asset_partition_range_start")
        partitions = (start, request.tags["dagster/asset_partition_range_end"]) if start else None
        assert execute_assets(defs, instance, names, partitions=partitions).success
        done |= {f"{name}[{start}..]" if start else name for name in names}
    return done


def test_the_stale_sensor_observes_first_then_materializes_exactly_the_stale_partitions(shop):
    project, warehouse, defs, instance = shop
    sensor = defs.resolve_sensor_def("strata_materialize_stale")
    repository = defs.get_repository_def()
    order = paid_order(warehouse)
    change_order(warehouse, order)
    context = dg.build_sensor_context(instance=instance, repository_def=repository)
    first = sensor.evaluate_tick(context)
    # First tick: the changed source's fingerprint differs from its data version: observe it, nothing else.
    assert [sorted(k.to_user_string() for k in r.asset_selection) for r in first.run_requests] == [["orders"]]
    run_sensor_requests(defs, instance, first.run_requests)
    cursor = None
    waves = []
    for _ in range(6):
        stale = stale_set(defs, instance)
        tick = sensor.evaluate_tick(
            dg.build_sensor_context(instance=instance, repository_def=repository, cursor=cursor)
        )
        cursor = tick.cursor
        if not tick.run_requests:
            break
        requested = set()
        for request in tick.run_requests:
            start = request.tags.get("dagster/asset_partition_range_start")
            end = request.tags.get("dagster/asset_partition_range_end")
            for key in request.asset_selection:
                if start is None:
                    requested.add(key.to_user_string())
                else:
                    keys = defs.resolve_asset_graph().get(key).partitions_def.get_partition_keys()
                    requested |= {f"{key.to_user_string()}[{p}]" for p in keys if start <= p <= end}
        assert requested == stale
        waves.append(requested)
        run_sensor_requests(defs, instance, tick.run_requests)
    assert stale_set(defs, instance) == set()
    month = order_day(warehouse, order)[:8] + "01"
    assert [len(wave) for wave in waves][0] == 3 and waves[-1] == {f"monthly_revenue[{month}]"}
    # The 40 stale days of daily_revenue went as one ranged run.
    assert len(waves) == 3


def test_evaluating_the_conditions_leaves_the_code_locations_asset_graph_as_it_was(shop):
    """Dagster 1.12's `any_deps_match(...).allow(...)` removed every other dependency from the asset
    graph it evaluated (in the code server: the stale sensor's graph too); strata's conditions use none."""
    project, warehouse, defs, instance = shop
    graph = defs.resolve_asset_graph()
    before = {key: set(graph.get(key).parent_keys) for key in graph.get_all_asset_keys()}
    dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert {key: set(graph.get(key).parent_keys) for key in graph.get_all_asset_keys()} == before
