"""Stale partitions are visible where users look: the `strata_stale_partitions` check of a
partitioned model fails (WARN) with the stale partitions' count and ranges, reported by the stale
sensor's tick without a run, and passes again once they are rebuilt; its answer is Dagster's own
per-partition status, read by the engine in one scan."""

import dagster as dg

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.stale_partitions import STALE_PARTITIONS_CHECK
from strata_dagster_tests.dagster_support import change_order, day_keys, order_day, resolver
from strata_dagster_tests.test_dagster_stale_sensor import Ticks, launch, shop  # noqa: F401 (a fixture)
from strata_dagster_tests.test_dagster_staleness import paid_order

DAILY, MONTHLY = dg.AssetKey("daily_revenue"), dg.AssetKey("monthly_revenue")


def reported(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {
        event.asset_key.to_user_string(): event
        for event in result.asset_events
        if isinstance(event, dg.AssetCheckEvaluation) and event.check_name == STALE_PARTITIONS_CHECK
    }


def dagster_stale(defs, instance, key, partitions) -> list[str]:
    status = resolver(defs, instance)
    return [p for p in partitions if status.get_status(key, p).value == "STALE"]


def check_events(instance, run) -> dict[str, object]:
    records = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    return {
        record.dagster_event.event_specific_data.asset_key.to_user_string(): (
            record.dagster_event.event_specific_data
        )
        for record in records
        if record.dagster_event.event_specific_data.check_name == STALE_PARTITIONS_CHECK
    }


def test_stale_partitions_show_as_a_failing_check_until_rebuilt(shop):  # noqa: F811
    project, warehouse, defs, instance = shop
    tick = Ticks(defs, instance)
    first = reported(tick())
    # The first tick reports every partitioned model's check: nothing stale.
    assert {name: event.passed for name, event in first.items()} == {
        "daily_revenue": True,
        "monthly_revenue": True,
    }
    assert first["daily_revenue"].metadata[c.STALE_PARTITIONS_TAG].value == 0
    order = paid_order(warehouse)
    day = order_day(warehouse, order)
    change_order(warehouse, order)
    launch(defs, instance, tick().run_requests[0])  # observe orders
    wave1 = tick()
    assert reported(wave1) == {}  # an unchanged answer is not reported again
    launch(defs, instance, wave1.run_requests[0])  # stg_orders and the others reading orders
    wave2 = tick()
    failing = reported(wave2)["daily_revenue"]
    assert not failing.passed and failing.severity == dg.AssetCheckSeverity.WARN
    assert failing.metadata[c.STALE_PARTITIONS_TAG].value == 1
    assert failing.metadata["stale_partition_ranges"].value == [day]
    assert day in failing.description and "stg_orders" in failing.description
    # The answer is Dagster's own status, partition by partition.
    assert dagster_stale(defs, instance, DAILY, day_keys()) == [day]
    (daily,) = [r for r in wave2.run_requests if r.asset_selection == [DAILY]]
    run = launch(defs, instance, daily)
    # The check runs with its model's materialization: nothing stale left.
    assert check_events(instance, run)["daily_revenue"].passed
    wave3 = tick()
    after = reported(wave3)
    assert after["daily_revenue"].passed
    month = day[:8] + "01"
    assert not after["monthly_revenue"].passed
    assert after["monthly_revenue"].metadata["stale_partition_ranges"].value == [day[:7]]
    assert dagster_stale(defs, instance, MONTHLY, [f"2025-0{m}-01" for m in (1, 2)]) == [month]
    # The waves that follow (the month, and the unpartitioned readers) until nothing is stale.
    result, final = wave3, {}
    for _ in range(6):
        for request in result.run_requests:
            launch(defs, instance, request)
        result = tick()
        final.update(reported(result))
        if not result.run_requests:
            break
    assert result.run_requests == [] and result.skip_message.startswith("Nothing to do")
    assert final["monthly_revenue"].passed
    assert final["monthly_revenue"].metadata[c.STALE_PARTITIONS_TAG].value == 0
