"""Volatile models in Dagster: tagged and described with their refresh, rebuilt (never reused) when
materialized, and requested by the stale sensor and the automation condition once their refresh
period has passed since their last materialization."""

import time

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.orchestration.sensors import refresh, stale_sensor
from strata_dagster_tests.orchestration.test_dagster_automation import requested
from strata_dagster_tests.support.dagster_support import execute_assets, materializations
from strata_dagster_tests.support.engine_support import make_module_project

MODULE = """
source events {
  table: raw.events
}

model sampled {
  from events
  derive r = random()
}

model daily_clock {
  from events
  filter ts <= now()
  refresh: daily
  description: 'events up to now'
}

model plain {
  from events
}
"""
MODELS = ["sampled", "daily_clock", "plain"]
DAY = 24 * 3600


@pytest.fixture
def materialized(tmp_path):
    project, warehouse = make_module_project(
        tmp_path,
        "events.strata",
        MODULE,
        "CREATE TABLE raw.events AS SELECT range AS id, TIMESTAMP '2025-01-01' + to_minutes(range) AS ts "
        "FROM range(10)",
    )
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    assert execute_assets(defs, instance, ["events"]).success
    assert execute_assets(defs, instance, MODELS).success
    return defs, instance


def sensor_selection(defs, instance) -> set[str]:
    sensor = defs.resolve_sensor_def(stale_sensor.STALE_SENSOR_NAME)
    context = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
    return {
        key.to_user_string()
        for run in sensor.evaluate_tick(context).run_requests
        for key in run.asset_selection
    }


def test_volatile_assets_carry_their_refresh_in_tags_metadata_and_description(materialized):
    defs, _ = materialized
    graph = defs.resolve_asset_graph()
    sampled, daily, plain = (graph.get(dg.AssetKey(name)) for name in MODELS)
    assert sampled.tags["strata/refresh"] == "always" and sampled.tags["strata/volatile"] == "true"
    assert sampled.metadata["strata/volatile_calls"] == "RANDOM()"
    assert "Refresh: always (it calls RANDOM())" in sampled.description
    assert daily.tags["strata/refresh"] == "daily" and daily.metadata["strata/refresh"] == "daily"
    assert daily.description.startswith("events up to now\n\nRefresh: daily")
    assert "strata/refresh" not in plain.tags and "strata/volatile" not in plain.tags
    assert "strata/refresh" not in plain.metadata


def test_materializing_a_volatile_model_rebuilds_it(materialized):
    defs, instance = materialized
    result = execute_assets(defs, instance, MODELS)
    assert result.success
    path = {name: materializations(result, name)[0].metadata["strata/path"].value for name in MODELS}
    assert path["sampled"] == "full"  # random() drew new rows
    assert path["daily_clock"] == "reused"  # the same UTC day
    assert path["plain"] == "reused"


def test_the_stale_sensor_requests_volatile_models_when_their_period_passed(materialized, monkeypatch):
    defs, instance = materialized
    monkeypatch.setattr(refresh, "_now", time.time)
    assert sensor_selection(defs, instance) == {"sampled"}  # always; the daily one is fresh today
    monkeypatch.setattr(refresh, "_now", lambda: time.time() + DAY)
    assert sensor_selection(defs, instance) == {"sampled", "daily_clock"}


def test_the_automation_condition_requests_volatile_models_when_their_period_passed(
    materialized, monkeypatch
):
    defs, instance = materialized
    monkeypatch.setattr(refresh, "_now", time.time)
    assert requested(dg.evaluate_automation_conditions(defs=defs, instance=instance), defs) == {"sampled"}
    monkeypatch.setattr(refresh, "_now", lambda: time.time() + DAY)
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert requested(result, defs) == {"sampled", "daily_clock"}


PARTITIONED = """
source events {
  table: raw.events
}

model daily_sample {
  from events
  let day = cast(ts as date)
  derive r = random()
  partitioned_by: day(day)
  refresh: daily
}
"""


def test_the_stale_sensor_requests_every_partition_of_a_due_partitioned_model(tmp_path, monkeypatch):
    """The engine rebuilds a volatile partitioned model completely: the sensor asks for all of it."""
    project, warehouse = make_module_project(
        tmp_path,
        "events.strata",
        PARTITIONED,
        "CREATE TABLE raw.events AS SELECT range AS id, TIMESTAMP '2025-01-01' + to_hours(range * 12) AS ts "
        "FROM range(8)",
    )
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    assert execute_assets(defs, instance, ["events"]).success
    assert execute_assets(defs, instance, ["daily_sample"], partitions=("2025-01-01", "2025-01-04")).success
    monkeypatch.setattr(refresh, "_now", time.time)
    sensor = defs.resolve_sensor_def(stale_sensor.STALE_SENSOR_NAME)
    context = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
    assert sensor.evaluate_tick(context).run_requests == []
    monkeypatch.setattr(refresh, "_now", lambda: time.time() + DAY)
    runs = sensor.evaluate_tick(context).run_requests
    assert [
        (run.tags[stale_sensor.RANGE_START_TAG], run.tags[stale_sensor.RANGE_END_TAG]) for run in runs
    ] == [("2025-01-01", "2025-01-04")]
