"""`strata_materialize_stale`: a sensor that materializes exactly the stale asset partitions.

Each tick reads Dagster's own stale status (what the UI shows), takes the stale asset partitions
whose upstream assets are fresh and idle, and requests them: the unpartitioned ones in one run,
each partitioned asset in one ranged run per contiguous range of stale partitions (its backfill
policy is a single run). Waves follow until nothing is stale. The sensor also observes the sources
whenever one was not observed within `observe_interval_seconds`, so a changed row is noticed.

From the UI: Automation → strata_materialize_stale → "Test sensor" previews the runs and launches
them; turning the sensor on keeps everything fresh.
"""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContext
from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES

from strata_dagster.orchestration.refresh import is_due, refresh_of

STALE_SENSOR_NAME = "strata_materialize_stale"
_now = time.time  # the sensor's clock (tests move it)
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


class _Loading(LoadingContext):
    """The batch-loading scope one sensor tick reads the instance through."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._instance = instance
        self._loaders: dict = {}  # type: ignore[type-arg]

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def loaders(self) -> dict:  # type: ignore[type-arg]
        return self._loaders


@dataclass
class StalePlan:
    """What one tick found: stale asset partitions, and the runs that materialize the ready ones."""

    stale: dict[dg.AssetKey, list[str | None]] = field(default_factory=dict)
    runs: list[dg.RunRequest] = field(default_factory=list)


def plan_stale_runs(
    instance: dg.DagsterInstance,
    asset_graph,  # type: ignore[no-untyped-def]
    job_of: Mapping[dg.AssetKey, str],
    run_tags: Mapping[str, str],
) -> StalePlan:
    """The stale partitions of the assets of `job_of`, and runs (in the job each asset belongs to)
    for those whose upstream is fresh and idle."""
    keys = list(job_of)
    # Runs first, then stale status: a run that finishes in between is seen as busy (its assets
    # wait a tick), never as stale-and-idle (which would launch it twice).
    busy = _assets_in_progress(instance, job_of)
    resolver = CachingStaleStatusResolver(instance, asset_graph, _Loading(instance))
    plan = StalePlan()
    for key in keys:
        node = asset_graph.get(key)
        partitions: Sequence[str | None] = (
            node.partitions_def.get_partition_keys(dynamic_partitions_store=instance)
            if node.partitions_def is not None
            else [None]
        )
        stale = [p for p in partitions if resolver.get_status(key, p) == StaleStatus.STALE]
        if is_due(instance, key, refresh_of(node)):
            stale = list(partitions)  # a refresh rebuilds the whole model
        if stale:
            plan.stale[key] = stale
    ready = [
        key
        for key in plan.stale
        if key not in busy
        and not any(parent in plan.stale or parent in busy for parent in _upstream(asset_graph, key, job_of))
    ]
    unpartitioned = sorted((key for key in ready if plan.stale[key] == [None]), key=str)
    for job in sorted({job_of[key] for key in unpartitioned}):
        selection = [key for key in unpartitioned if job_of[key] == job]
        plan.runs.append(dg.RunRequest(job_name=job, asset_selection=selection, tags=dict(run_tags)))
    for key in sorted((key for key in ready if plan.stale[key] != [None]), key=str):
        partitions_def = asset_graph.get(key).partitions_def
        subset = partitions_def.subset_with_partition_keys(plan.stale[key])
        for key_range in subset.get_partition_key_ranges(partitions_def):
            tags = {**run_tags, RANGE_START_TAG: key_range.start, RANGE_END_TAG: key_range.end}
            plan.runs.append(dg.RunRequest(job_name=job_of[key], asset_selection=[key], tags=tags))
    return plan


def _upstream(asset_graph, key: dg.AssetKey, job_of: Mapping[dg.AssetKey, str]) -> set[dg.AssetKey]:  # type: ignore[no-untyped-def]
    """The parents of `key`, and through a parent no job materializes (a partitions companion,
    which a model's build observes) the assets that parent follows."""
    found: set[dg.AssetKey] = set()
    stack = list(asset_graph.get(key).parent_keys)
    while stack:
        parent = stack.pop()
        if parent in found:
            continue
        found.add(parent)
        if parent not in job_of:
            stack.extend(asset_graph.get(parent).parent_keys)
    return found


def _observation_due(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey], interval: float) -> bool:
    """Whether a source was never observed, or not within the last `interval` seconds."""
    now = _now()
    for key in keys:
        record = instance.get_latest_data_version_record(key, is_source=True)
        if record is None or now - record.timestamp >= interval:
            return True
    return False


def _assets_in_progress(instance: dg.DagsterInstance, job_of: Mapping[dg.AssetKey, str]) -> set[dg.AssetKey]:
    """Assets a queued or running run will materialize; a run of a whole job has no asset
    selection of its own: it covers every asset of the job (all of them for an unknown job)."""
    busy: set[dg.AssetKey] = set()
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=NOT_FINISHED_STATUSES)):
        if run.asset_selection:
            busy |= set(run.asset_selection)
        else:
            in_job = {key for key, job in job_of.items() if job == run.job_name}
            busy |= in_job or set(job_of)
    return busy


def stale_partitions_sensor(
    jobs: Sequence[Any],
    job_of: Mapping[dg.AssetKey, str],
    observable: Sequence[dg.AssetKey],
    observe_job: str,
    *,
    name: str = STALE_SENSOR_NAME,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    minimum_interval_seconds: int = 5,
    observe_interval_seconds: int = 60,
    run_tags: Mapping[str, str] | None = None,
) -> dg.SensorDefinition:
    """The sensor over the assets of `job_of` (asset -> the job, one per partitions definition,
    that materializes it); the unpartitioned `observable` sources are observed periodically by
    job `observe_job`."""
    tags = {"strata/sensor": name, **(run_tags or {})}

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        default_status=default_status,
        minimum_interval_seconds=minimum_interval_seconds,
        description=(
            "Materializes exactly the stale asset partitions, upstream first, as ranged runs; observes "
            f"the strata sources every {observe_interval_seconds}s. Test it to preview the runs."
        ),
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        runs: list[dg.RunRequest] = []
        busy = _assets_in_progress(context.instance, job_of)
        due = _observation_due(context.instance, observable, observe_interval_seconds)
        if due and not busy.intersection(observable):
            runs.append(dg.RunRequest(job_name=observe_job, asset_selection=list(observable), tags=tags))
        else:
            graph = context.repository_def.asset_graph  # type: ignore[union-attr]
            plan = plan_stale_runs(context.instance, graph, job_of, tags)
            runs.extend(plan.runs)
            if plan.stale and not plan.runs:
                context.log.info("stale assets are waiting for their upstream runs to finish")
        return dg.SensorResult(run_requests=runs)

    return _sensor
