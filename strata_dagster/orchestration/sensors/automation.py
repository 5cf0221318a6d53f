"""Materializing exactly the stale partitions: an automation condition and the sensor that runs it.

Dagster's "Materialize unsynced" covers stale unpartitioned assets and missing partitions, not
stale partitions. `stale_condition()` is true for exactly the asset partitions Dagster reports
stale (an input got a new data version, or the code version changed) whose inputs are all fresh:
the sensor materializes them wave by wave, upstream first, until nothing is stale. It reads the
stale status from the provenance Dagster records on each materialization (sensors.stale_status,
public event records), so it acts on what the UI shows, whether the change happened before the
sensor was turned on or after. Sources are observed on a cron so changes are noticed at all.
"""

from __future__ import annotations

import dagster as dg

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.sensors.refresh import is_due, refresh_of
from strata_dagster.orchestration.sensors.stale_status import StaleStatusReader

AC = dg.AutomationCondition

AUTOMATION_SENSOR_NAME = "strata_automation"
OBSERVATION_CRON = "* * * * *"


class StaleAutomationCondition(dg.AutomationCondition):
    """True for the candidate asset partitions that are stale (sensors.stale_status), and for all of
    an asset whose refresh period has passed (see sensors.refresh)."""

    @property
    def name(self) -> str:
        return "stale"

    @property
    def description(self) -> str:
        return "Stale: an input has a new data version, the code version changed or its refresh period passed"

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        instance = context.asset_graph_view.instance
        candidates = context.candidate_subset
        if is_due(instance, context.key, refresh_of(context.asset_graph.get(context.key))):
            return dg.AutomationResult(context, candidates)
        reader = StaleStatusReader(instance, context.asset_graph)
        if context.partitions_def is None:
            stale = not candidates.is_empty and reader.is_stale(context.key)
            return dg.AutomationResult(context, candidates if stale else context.get_empty_subset())
        keys = {
            partition
            for partition in candidates.expensively_compute_partition_keys()
            if reader.is_stale(context.key, partition)
        }
        return dg.AutomationResult(context, candidates.compute_intersection_with_partition_keys(keys))


class CompanionCondition(dg.AutomationCondition):
    """True for all of a partitions companion (tag `strata/companion`), false for any other asset."""

    @property
    def name(self) -> str:
        return "partitions companion"

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        tags = context.asset_graph.get(context.key).tags or {}
        is_companion = tags.get(c.COMPANION_TAG) == c.PARTITIONS_COMPANION
        return dg.AutomationResult(
            context, context.candidate_subset if is_companion else context.get_empty_subset()
        )


def stale_condition() -> dg.AutomationCondition:
    """Stale, with every input fresh and nothing of it running: upstream goes first. A model read
    through a partitions companion (never stale itself) waits for the companion's model too.
    (Through a condition on the dependency, not `any_deps_match(...).allow(...)`: Dagster 1.12's
    `allow` and `ignore` remove the other dependencies from the code location's asset graph itself.)"""
    stale = StaleAutomationCondition()
    waiting = stale | AC.in_progress()
    through_companions = AC.any_deps_match(CompanionCondition() & AC.any_deps_match(waiting))
    return (stale & ~AC.any_deps_match(waiting) & ~through_companions & ~AC.in_progress()).with_label(
        "strata: stale, inputs fresh"
    )


def observation_condition(cron: str = OBSERVATION_CRON) -> dg.AutomationCondition:
    """Observe a source on every tick of `cron` (every minute by default)."""
    return (AC.cron_tick_passed(cron) & ~AC.in_progress()).with_label(f"strata: observe on '{cron}'")


def automation_sensor(
    target: dg.AssetSelection,
    name: str = AUTOMATION_SENSOR_NAME,
    *,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    minimum_interval_seconds: int = 5,
) -> dg.AutomationConditionSensorDefinition:
    """The sensor that evaluates the strata conditions (declarative automation) and launches what
    they request; partitioned requests go through a backfill, whose daemon works in 30-second
    steps. Stopped by default; it runs in the code server, where the stale condition can read the
    project's graph. Turn on this one or `strata_materialize_stale`, not both.
    """
    return dg.AutomationConditionSensorDefinition(
        name,
        target=target,
        default_status=default_status,
        minimum_interval_seconds=minimum_interval_seconds,
        use_user_code_server=True,
        description=(
            "Materializes exactly the stale asset partitions, upstream first, and observes the "
            "strata sources every minute."
        ),
    )
