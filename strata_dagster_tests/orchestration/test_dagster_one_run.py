"""`strata_materialize_all` and `strata_backfill_range`: the waves a Dagster backfill spreads over
daemon iterations, run inside one run. What they leave is what the waves launched one by one leave:
every asset and partition materialized with its own data version and fresh; a range backfill
rebuilds exactly its partitions, recorded with its reason; without a reason it is refused before
any step (E085, canceled, nothing written); a range the asset does not have is E068; a failed wave
stops the later ones."""

import logging

import dagster as dg
import pytest
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run

from strata_dagster import build_definitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.jobs.executor import REFUSED_WROTE
from strata_dagster.orchestration.jobs.one_run import LAUNCHED_BY_TAG, wave_plan
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster_tests.orchestration.test_dagster_staleness import latest_versions
from strata_dagster_tests.support.dagster_support import (
    content_materializations,
    day_keys,
    history_entries,
    make_small_shop,
    materialize_everything,
    run_events,
    stale_set,
    warehouse_digest,
)
from strata_dagster_tests.support.engine_support import SHOP_MODELS, edit_module

MONTHS = ["2025-01-01", "2025-02-01"]


def launch_job(defs, instance, job: str, tags=None, config=None) -> dg.DagsterRun:
    """A run of `job` as a run worker executes it (the definitions' own executor, the guard)."""
    job_def = defs.resolve_job_def(job)
    run = instance.create_run_for_job(job_def, tags={**job_def.tags, **(tags or {})}, run_config=config or {})
    execute_run(InMemoryJob(job_def), run, instance)
    finished = instance.get_run_by_id(run.run_id)
    assert finished is not None
    return finished


def launched_by(instance, run: dg.DagsterRun) -> list[dg.DagsterRun]:
    """The runs `run` launched, in the order they ran."""
    found = [item for item in instance.get_runs() if item.tags.get(LAUNCHED_BY_TAG) == run.run_id]
    return sorted(found, key=lambda item: instance.get_run_record_by_id(item.run_id).create_timestamp)


def range_config(assets, first, last):
    return {"ops": {UNSCOPED.backfill_range_op: {"config": {"assets": assets, "first": first, "last": last}}}}


@pytest.fixture
def shop(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    return project, warehouse, build_definitions(project, warehouse=warehouse), dg.DagsterInstance.ephemeral()


def test_the_waves_go_upstream_first_one_per_partitioning(shop):
    _, _, defs, _ = shop
    graph = defs.resolve_asset_graph()
    job_of = {key: "strata_unpartitioned" for key in graph.materializable_asset_keys}
    job_of.update(
        {
            dg.AssetKey("daily_revenue"): "strata_daily_revenue_partitions",
            dg.AssetKey("monthly_revenue"): "strata_monthly_revenue_partitions",
        }
    )
    waves = wave_plan(graph, job_of)
    assert [job for job, _ in waves] == [
        "strata_unpartitioned",
        "strata_daily_revenue_partitions",
        "strata_monthly_revenue_partitions",
    ]
    # daily_revenue reads stg_orders through its companion stg_orders__by_day, which is in no job.
    assert dg.AssetKey("stg_orders") in waves[0][1]


def test_materialize_all_leaves_everything_fresh_with_the_versions_of_the_waves_launched_alone(
    shop, tmp_path
):
    project, warehouse, defs, instance = shop
    run = launch_job(defs, instance, UNSCOPED.materialize_all_job)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    inner = launched_by(instance, run)
    assert [item.job_name for item in inner] == [
        "strata_observe_sources",
        "strata_unpartitioned",
        "strata_daily_revenue_partitions",
        "strata_monthly_revenue_partitions",
    ]
    assert all(item.status == dg.DagsterRunStatus.SUCCESS for item in inner)
    assert [item.tags[c.PURPOSE_TAG] for item in inner] == ["observe"] + ["materialize_all"] * 3
    days = day_keys()
    assert (
        inner[2].tags["dagster/asset_partition_range_start"],
        inner[2].tags["dagster/asset_partition_range_end"],
    ) == (
        days[0],
        days[-1],
    )
    assert stale_set(defs, instance) == set()
    entries = history_entries(warehouse)
    assert {model for entry in entries for model in entry.models} == SHOP_MODELS
    assert {entry.kind for entry in entries} == {"run"}  # an ordinary run: no reason needed
    # The same content, partition by partition, as the waves launched one by one elsewhere.
    other_project, other_warehouse = make_small_shop(tmp_path / "alone")
    other_defs = build_definitions(other_project, warehouse=other_warehouse)
    other = dg.DagsterInstance.ephemeral()
    materialize_everything(other_defs, other)
    for name, partitions in (("daily_revenue", days), ("monthly_revenue", MONTHS)):
        versions = latest_versions(instance, name, partitions)
        assert versions == latest_versions(other, name, partitions)
        assert len(set(versions.values())) > 1  # one version per partition, not one per run
    for name in ("stg_orders", "orders_enriched", "order_timeline"):
        assert name not in stale_set(defs, instance)
        assert instance.get_latest_materialization_event(dg.AssetKey(name)) is not None


def test_a_range_backfill_rebuilds_exactly_its_partitions_with_its_reason(shop):
    project, warehouse, defs, instance = shop
    assert launch_job(defs, instance, UNSCOPED.materialize_all_job).status == dg.DagsterRunStatus.SUCCESS
    built = len(history_entries(warehouse))
    days = day_keys()[3:6]
    run = launch_job(
        defs,
        instance,
        UNSCOPED.backfill_range_job,
        tags={c.REASON_TAG: "restated three days"},
        config=range_config(["daily_revenue"], days[0], days[-1]),
    )
    assert run.status == dg.DagsterRunStatus.SUCCESS
    (inner,) = launched_by(instance, run)
    assert inner.job_name == "strata_backfill_daily_revenue_partitions"
    assert inner.tags[c.REASON_TAG] == "restated three days"
    materialized = content_materializations(instance, inner.run_id)
    assert sorted(event.dagster_event.partition for event in materialized) == days
    entries = history_entries(warehouse)
    assert len(entries) == built + 1
    entry = entries[-1]
    assert (entry.kind, entry.reason, entry.models) == ("backfill", "restated three days", ("daily_revenue",))
    assert sorted(entry.detail["partitions"]) == days
    assert stale_set(defs, instance) == set()


def test_a_range_backfill_without_a_reason_is_refused_before_any_step(shop):
    project, warehouse, defs, instance = shop
    before = warehouse_digest(warehouse)
    days = day_keys()[:3]
    run = launch_job(
        defs, instance, UNSCOPED.backfill_range_job, config=range_config(["daily_revenue"], days[0], days[-1])
    )
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run_events(instance, run.run_id, dg.DagsterEventType.STEP_START) == []
    (canceled,) = run_events(instance, run.run_id, dg.DagsterEventType.RUN_CANCELED)
    assert canceled.message.startswith("error[E085]") and "has no `strata/reason` tag" in canceled.message
    assert launched_by(instance, run) == []
    assert warehouse_digest(warehouse) == before


@pytest.mark.parametrize(
    ("assets", "first", "last", "says"),
    [
        (["daily_revenue"], "2025-01-03", "2024-12-31", "no partition `2024-12-31`"),
        (["daily_revenue"], "2025-01-05", "2025-01-02", "first after last"),
        (["stg_orders"], "2025-01-01", "2025-01-02", "`stg_orders` is not a partitioned strata model"),
        (["no_such_model"], "2025-01-01", "2025-01-02", "`no_such_model` is not a partitioned strata model"),
    ],
)
def test_a_range_the_assets_do_not_have_is_e068(shop, assets, first, last, says):
    project, warehouse, defs, instance = shop
    before = warehouse_digest(warehouse)
    run = launch_job(
        defs,
        instance,
        UNSCOPED.backfill_range_job,
        tags={c.REASON_TAG: "why"},
        config=range_config(assets, first, last),
    )
    # Refused before any step, as a backfill without a reason is: no step failure, no stack trace.
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run_events(instance, run.run_id, dg.DagsterEventType.STEP_START) == []
    assert run_events(instance, run.run_id, dg.DagsterEventType.STEP_FAILURE) == []
    (canceled,) = run_events(instance, run.run_id, dg.DagsterEventType.RUN_CANCELED)
    assert canceled.message.startswith("error[E068]") and says in canceled.message
    # The refusal is one error line of the run's log, with its code and what was written: nothing.
    (line,) = [
        entry
        for entry in instance.all_logs(run.run_id)
        if entry.dagster_event is None and entry.user_message.startswith("error[E068]")
    ]
    assert line.level == logging.ERROR and says in line.user_message
    assert line.user_message.endswith(REFUSED_WROTE)
    assert launched_by(instance, run) == []
    assert warehouse_digest(warehouse) == before


def test_a_failed_wave_stops_the_later_ones(shop):
    project, warehouse, _, instance = shop
    # A contract the data breaks: stg_customers fails its build (E031) in the unpartitioned wave.
    edit_module(project / "staging.strata", "    name: VARCHAR,\n", "    name: BIGINT,\n")
    defs = build_definitions(project, warehouse=warehouse)
    run = launch_job(defs, instance, UNSCOPED.materialize_all_job)
    assert run.status == dg.DagsterRunStatus.FAILURE
    inner = launched_by(instance, run)
    assert [(item.job_name, item.status) for item in inner] == [
        ("strata_observe_sources", dg.DagsterRunStatus.SUCCESS),
        ("strata_unpartitioned", dg.DagsterRunStatus.FAILURE),
    ]
    (failure,) = run_events(instance, run.run_id, dg.DagsterEventType.STEP_FAILURE)
    error = failure.dagster_event.step_failure_data.user_failure_data
    assert "strata_unpartitioned" in error.description and inner[1].run_id in error.description
    assert "Later waves were not run" in error.description
