"""Stale partitions are visible where users look: the `strata_stale_partitions` check of a
partitioned model shows `strata plan --only-stale`'s answer for it, whatever evaluated it last (its
model's run, its *Execute* button, a source's observation, another model's build, the stale
sensor's tick), and never passes while the plan would rebuild something of the model."""

import json
import random
import subprocess
import sys

import dagster as dg
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster import build_definitions
from strata_dagster.cli.main import main
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.stale_partitions import STALE_PARTITIONS_CHECK
from strata_dagster_tests.orchestration.test_dagster_stale_sensor import Ticks, launch, shop  # noqa: F401 (a fixture)
from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    change_order,
    execute_assets,
    make_small_shop,
    observe_sources,
    order_day,
    resolver,
)
from strata_dagster_tests.support.engine_support import execute

DAILY, MONTHLY = dg.AssetKey("daily_revenue"), dg.AssetKey("monthly_revenue")
ORDERS_READERS = ["stg_orders", "order_status_log", "first_seen_orders"]


def reported(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {
        event.asset_key.to_user_string(): event
        for event in result.asset_events
        if isinstance(event, dg.AssetCheckEvaluation) and event.check_name == STALE_PARTITIONS_CHECK
    }


def shown(instance, name: str) -> dg.AssetCheckEvaluation:
    """The check's result Dagster shows for asset `name` (its latest evaluation)."""
    key = dg.AssetCheckKey(dg.AssetKey(name), STALE_PARTITIONS_CHECK)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    assert isinstance(record.evaluation, dg.AssetCheckEvaluation), record
    return record.evaluation


def value(evaluation, name):
    return evaluation.metadata[name].value


def dagster_stale(defs, instance, key, partitions) -> list[str]:
    status = resolver(defs, instance)
    return [p for p in partitions if status.get_status(key, p).value == "STALE"]


def run_check_alone(defs, instance, name):
    """A checks-only run of the model's check (the UI's *Execute* button); its evaluation."""
    key = dg.AssetCheckKey(dg.AssetKey(name), STALE_PARTITIONS_CHECK)
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection={key}
    )
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert result.success
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def cli_plan(project, warehouse) -> dict[str, dict]:
    """`strata plan --only-stale --json`, as a user runs it: each model's plan."""
    found = subprocess.run(
        [sys.executable, "-m", "strata_dagster.cli.main", "plan", str(project), "--warehouse", str(warehouse)]
        + ["--only-stale", "--json"],
        capture_output=True,
        text=True,
    )
    assert found.returncode in (0, 1), found.stderr
    return {model["model"]: model for model in json.loads(found.stdout)["models"]}


def agrees_with_plan(evaluation: dg.AssetCheckEvaluation, planned: dict, partitions: int) -> str | None:
    """None when the check's result says what the plan says of its model; else what differs."""
    nothing = not planned["depends_on"] and (
        (planned["path"] == "reused" and not planned["publishes_again"])
        or planned["path"] == "cutoff-candidate"
    )
    if evaluation.passed != nothing:
        return f"passed={evaluation.passed} but the plan says {planned['path']}: {planned['why']}"
    if nothing:
        return None
    if planned["depends_on"]:
        waits = value(evaluation, "waits_for") if "waits_for" in evaluation.metadata else None
        return None if waits == planned["depends_on"] else f"waits for {waits}, plan: {planned['depends_on']}"
    count = value(evaluation, c.STALE_PARTITIONS_TAG)
    if planned["path"] == "partitions" and planned["partitions_exact"]:
        expected = (len(planned["partitions"]), planned["partition_ranges"][:50])
        found = (count, value(evaluation, "stale_partition_ranges"))
        return None if found == expected else f"stale {found}, plan: {expected}"
    if "missing_partitions" in evaluation.metadata:
        return None if value(evaluation, "missing_partitions") == partitions else "missing count"
    return None if count == partitions else f"{count} stale, the plan rebuilds all {partitions}"


def engine_agrees_with_plan(found, planned: dict) -> str | None:
    """None when the engine's stale partitions of a model (engine.partition_staleness: what the
    stale sensor requests) are what the plan rebuilds of it. Not compared: a model waiting for an
    upstream rebuilt or published again first, or published again itself (the engine answers
    against its inputs' live views, as Dagster's staleness does)."""
    if found is None or planned["depends_on"] or planned["publishes_again"]:
        return None
    nothing = planned["path"] in ("reused", "cutoff-candidate")
    if nothing:
        return None if found.keys == () else f"engine: stale {found.keys[:5]} ({found.reason}), plan: nothing"
    if planned["path"] == "partitions" and planned["partitions_exact"]:
        if set(found.keys) == set(planned["partitions"]):
            return None
        return f"engine: stale {found.keys[:5]}, plan: {planned['partitions'][:5]}"
    return None if found.keys else f"engine: nothing stale, plan: {planned['path']}: {planned['why']}"


def test_executed_alone_after_an_observation_it_never_passes_while_the_plan_would_rebuild(shop):  # noqa: F811
    project, warehouse, defs, instance = shop
    assert run_check_alone(defs, instance, "daily_revenue").passed
    order = paid_order(warehouse)
    change_order(warehouse, order)
    observe_sources(defs, instance)
    # stg_orders is stale: the day of the order is rebuilt once it is (the plan "depends" on it).
    alone = run_check_alone(defs, instance, "daily_revenue")
    assert not alone.passed and alone.severity == dg.AssetCheckSeverity.WARN
    assert value(alone, "waits_for") == ["stg_orders"]
    assert "`stg_orders` is stale and rebuilt first" in alone.description
    planned = cli_plan(project, warehouse)
    assert agrees_with_plan(alone, planned["daily_revenue"], 40) is None
    assert (
        agrees_with_plan(run_check_alone(defs, instance, "monthly_revenue"), planned["monthly_revenue"], 2)
        is None
    )


def test_an_observation_re_evaluates_the_check_users_see_without_the_sensor(shop):  # noqa: F811
    project, warehouse, defs, instance = shop
    assert shown(instance, "daily_revenue").passed  # from the run that materialized it
    change_order(warehouse, paid_order(warehouse))
    observe_sources(defs, instance)  # by hand: no sensor, no run of the model
    after = shown(instance, "daily_revenue")
    assert not after.passed and value(after, "waits_for") == ["stg_orders"]
    # The observation that changed nothing does not write the same result again.
    before = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(DAILY, STALE_PARTITIONS_CHECK), limit=100
    )
    observe_sources(defs, instance)
    again = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(DAILY, STALE_PARTITIONS_CHECK), limit=100
    )
    assert len(again) == len(before)


def test_every_build_re_evaluates_the_checks_of_the_other_partitioned_models(shop):  # noqa: F811
    project, warehouse, defs, instance = shop
    order = paid_order(warehouse)
    day = order_day(warehouse, order)
    change_order(warehouse, order)
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, ORDERS_READERS).success
    # The unpartitioned models' run re-evaluated daily_revenue's check: exactly the order's day.
    failing = shown(instance, "daily_revenue")
    assert not failing.passed and value(failing, c.STALE_PARTITIONS_TAG) == 1
    assert value(failing, "stale_partition_ranges") == [day]
    assert f"(stg_orders has new rows in them): {day}" in failing.description
    assert dagster_stale(defs, instance, DAILY, [day]) == [day]  # the same day Dagster shows Unsynced
    waiting = shown(instance, "monthly_revenue")
    assert not waiting.passed and value(waiting, "waits_for") == ["daily_revenue"]
    # A run of another day: an ordinary run builds every stale partition of its model, and the
    # step records the day it rebuilt beyond its own; the check, run with its model, passes.
    other = next(key for key in ("2025-01-20", "2025-01-21") if key != day)
    result = execute_assets(defs, instance, ["daily_revenue"], partitions=other)
    found = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == STALE_PARTITIONS_CHECK and e.asset_key == DAILY
    ]
    # The run's own partition gets its answer (Dagster planned the check for it), then the model's.
    (in_run,) = [e for e in found if e.partition is None]
    assert [(e.partition, e.passed) for e in found if e.partition is not None] == [(other, True)]
    assert in_run.passed and shown(instance, "daily_revenue").passed
    assert dagster_stale(defs, instance, DAILY, [day, other]) == []
    month = shown(instance, "monthly_revenue")
    assert not month.passed and value(month, "stale_partition_ranges") == [day[:7]]
    assert execute_assets(defs, instance, ["monthly_revenue"], partitions=(day[:8] + "01",) * 2).success
    assert shown(instance, "monthly_revenue").passed
    planned = cli_plan(project, warehouse)
    assert planned["daily_revenue"]["path"] == planned["monthly_revenue"]["path"] == "reused"


def test_the_sensor_reports_only_what_users_do_not_see_yet(shop):  # noqa: F811
    project, warehouse, defs, instance = shop
    tick = Ticks(defs, instance)
    assert reported(tick()) == {}  # the runs that built them evaluated the checks
    order = paid_order(warehouse)
    change_order(warehouse, order)
    launch(defs, instance, tick().run_requests[0])  # observe orders: the observation re-evaluates
    wave1 = tick()
    assert reported(wave1) == {}
    assert not shown(instance, "daily_revenue").passed
    # A change of the answer no step saw (code, or a build outside Dagster) is the tick's to report.
    key = dg.AssetCheckKey(DAILY, STALE_PARTITIONS_CHECK)
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(asset_key=DAILY, check_name=key.name, passed=True, description="stale news")
    )
    assert reported(tick())["daily_revenue"].passed is False


CHANGES = [
    "change order",
    "move order",
    "change customer",
    "observe",
    "build staging",
    "build a day",
    "build days",
    "build months",
    "rollback",
]


def _change(project, warehouse, defs, instance, action: str, rng: random.Random) -> None:
    if action == "change order":
        change_order(warehouse, paid_order(warehouse, rng.randrange(30)), amount=f"{rng.randint(1, 9999)}.25")
    elif action == "move order":
        execute(
            warehouse,
            "UPDATE raw.orders SET order_ts = TIMESTAMP '2025-01-01 10:00:00' + to_days(?), "
            "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND WHERE order_id = ?",
            params=[rng.randrange(40), paid_order(warehouse, rng.randrange(30))],
        )
    elif action == "change customer":
        execute(
            warehouse,
            "UPDATE raw.customers SET region = ? WHERE customer_id = ?",
            params=[rng.choice(["north", "south", "east", "west"]), rng.randint(1, 40)],
        )
    elif action == "observe":
        observe_sources(defs, instance)
    elif action == "build staging":
        assert execute_assets(defs, instance, ORDERS_READERS).success
    elif action == "rollback":  # `strata rollback` to an earlier run, from the command line
        listed = subprocess.run(
            [sys.executable, "-m", "strata_dagster.cli.main", "history", str(project)]
            + ["--warehouse", str(warehouse), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        runs = [
            entry["run_id"] for entry in json.loads(listed.stdout) if entry["kind"] in ("run", "backfill")
        ]
        rolled = CliRunner().invoke(
            main, ["rollback", str(project), rng.choice(runs), "--warehouse", str(warehouse)]
        )
        assert rolled.exit_code == 0, rolled.output
    elif action == "build a day":
        day = f"2025-01-{rng.randint(1, 31):02d}"
        assert execute_assets(defs, instance, ["daily_revenue"], partitions=day).success
    elif action == "build months":  # an order moved inside its month leaves them equal: kept
        assert execute_assets(
            defs, instance, ["monthly_revenue"], partitions=("2025-01-01", "2025-02-01")
        ).success
    else:
        assert execute_assets(
            defs, instance, ["daily_revenue"], partitions=("2025-01-01", "2025-02-09")
        ).success


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=st.lists(st.sampled_from(CHANGES), min_size=2, max_size=5), seed=st.integers(0, 10_000))
def test_over_random_source_changes_the_check_says_what_the_plan_says(shop, actions, seed):  # noqa: F811
    """A random walk of source changes, observations, builds and command-line rollbacks (each
    example goes on from the last one's state): after each step, the check executed alone says what
    `strata plan --only-stale` says of its model, and so do the engine's stale partitions the
    sensor requests; after each observation or build the result users see (re-evaluated by that
    step, no sensor) says it too."""
    project, warehouse, defs, instance = shop
    rng = random.Random(seed)
    for action in actions:
        _change(project, warehouse, defs, instance, action, rng)
        planned = cli_plan(project, warehouse)
        engine = stale_partitions(project, warehouse)
        for name, partitions in (("daily_revenue", 40), ("monthly_revenue", 2)):
            differs = agrees_with_plan(run_check_alone(defs, instance, name), planned[name], partitions)
            assert differs is None, f"{name} alone after {action}: {differs}"
            differs = engine_agrees_with_plan(engine.get(name), planned[name])
            assert differs is None, f"{name}'s stale partitions after {action}: {differs}"
            if action in ("observe", "build staging", "build a day", "build days", "build months"):
                differs = agrees_with_plan(shown(instance, name), planned[name], partitions)
                assert differs is None, f"{name} shown after {action}: {differs}"


def test_at_3650_partitions_an_observation_shows_the_answer_within_2_seconds(tmp_path, monkeypatch):
    """Ten years of days: a `stg_orders` rebuilt outside Dagster (the command line), then the
    sources' observation by hand: the observation's step shows the check's new answer (the one day
    to rebuild) within 2 s of its start, the answer `strata plan --only-stale` gives."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # the command line reports to no instance
    project, warehouse = make_small_shop(tmp_path, rows=20_000, days=3650)
    run = CliRunner().invoke(main, ["run", str(project), "--warehouse", str(warehouse)])
    assert run.exit_code == 0, run.output
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert shown(instance, "daily_revenue").passed
    order = paid_order(warehouse)
    day = order_day(warehouse, order)
    change_order(warehouse, order)
    run = CliRunner().invoke(
        main, ["run", str(project), "--warehouse", str(warehouse), "--models", "stg_orders"]
    )
    assert run.exit_code == 0, run.output
    result = observe_sources(defs, instance)
    failing = shown(instance, "daily_revenue")
    assert not failing.passed and value(failing, c.STALE_PARTITIONS_TAG) == 1
    assert value(failing, "stale_partition_ranges") == [day]
    planned = cli_plan(project, warehouse)
    assert agrees_with_plan(failing, planned["daily_revenue"], 3650) is None
    records = instance.get_records_for_run(result.run_id).records
    start = min(
        r.event_log_entry.timestamp
        for r in records
        if r.event_log_entry.dagster_event_type == dg.DagsterEventType.STEP_START
    )
    shown_at = min(
        r.event_log_entry.timestamp
        for r in records
        if r.event_log_entry.dagster_event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    )
    print(f"3650 partitions: the check shown {shown_at - start:.2f}s after the observation step started")
    assert shown_at - start < 2.0, f"{shown_at - start:.2f}s"
