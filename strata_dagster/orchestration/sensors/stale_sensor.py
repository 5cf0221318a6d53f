"""`strata_materialize_stale`: a sensor that materializes exactly the stale asset partitions.

Business-versioned sources come first: new complete partitions are observed and their models
launched within the tick that lists them (sensors.arrivals). Each tick then compares the sources' content fingerprints (read by the sensor, read-only) with the
data versions Dagster recorded for them: a source that changed is observed by a run of
`strata_observe_sources` (tagged `strata/purpose=observe`), and nothing else happens that tick. When
no source changed, it reads the stale status the UI shows (from the provenance on Dagster's public
event records, sensors.stale_status; the engine's answer for the models built by partitions),
takes the stale asset partitions whose upstream assets are fresh and idle, and requests them (tagged
`strata/purpose=rebuild`, with `strata/why`): the unpartitioned ones in one run, each partitioned
asset in one ranged run per contiguous range of stale partitions (its backfill policy is a single
run). Waves follow until nothing is stale. An idle tick launches nothing, and when nothing happened
in the instance since a tick that found everything fresh, it skips the stale computation too.

From the UI: Automation → strata_materialize_stale → "Test sensor" previews the runs and launches
them; turning the sensor on keeps everything fresh.
"""

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from strata_dagster.errors import StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.stale_partitions import (
    PartitionedModel,
    dagster_is_stale,
    read_engine_stale,
    unshown,
)
from strata_dagster.orchestration.constants import LOCK_WAIT_SECONDS
from strata_dagster.orchestration.resources.strata import StrataResource
from strata_dagster.orchestration.sensors.arrivals import REPORTED_PREFIX, ArrivingSource, arrival_step
from strata_dagster.orchestration.sensors.observation import check_sources
from strata_dagster.orchestration.sensors.plan_wording import engine_why
from strata_dagster.orchestration.sensors.refresh import is_due, refresh_of
from strata_dagster.orchestration.sensors.stale_changes import AssetPartition, may_have_changed, touched_since
from strata_dagster.orchestration.sensors.stale_status import StaleStatusReader

STALE_SENSOR_NAME = "strata_materialize_stale"
OBSERVE_JOB = "strata_observe_sources"
RANGE_START_TAG = c.RANGE_START_TAG
RANGE_END_TAG = c.RANGE_END_TAG
# The runs that have not finished: queued, starting, running, canceling (suspended, where Dagster
# has it); not those an outside system manages.
_ENDED = {"SUCCESS", "FAILURE", "CANCELED", "MANAGED"}
NOT_FINISHED_STATUSES = [status for status in dg.DagsterRunStatus if status.value not in _ENDED]
_TAG_LENGTH = 250  # tags are for reading on the Runs page; the tick's log has the whole text
# A first reading of every stale status (about 40 ms per partition) stops after this long and goes on
# at the next tick, so a tick stays short (Dagster expects about 5 s; it times out after 60).
SCAN_SECONDS = 3.0
# ... but not before this many partitions: a small project is read in one tick, however busy the machine.
SCAN_MIN_PARTITIONS = 100


@dataclass
class StalePlan:
    """What one tick found: stale asset partitions, why, and the runs that materialize the ready ones."""

    stale: dict[dg.AssetKey, list[str | None]] = field(default_factory=dict)
    runs: list[dg.RunRequest] = field(default_factory=list)
    why: dict[dg.AssetKey, str] = field(default_factory=dict)
    # What Dagster's stale status says, refresh periods aside: what the next tick starts from.
    status_stale: dict[dg.AssetKey, list[str | None]] = field(default_factory=dict)
    pending: dict[dg.AssetKey, int] = field(default_factory=dict)  # partitions not read yet


@dataclass
class StaleScan:
    """A reading of every asset partition's stale status, possibly spread over ticks."""

    stale: dict[dg.AssetKey, list[str | None]]
    pending: dict[dg.AssetKey, int]  # asset -> index of the next partition to read


def plan_stale_runs(
    instance: dg.DagsterInstance,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    job_of: Mapping[dg.AssetKey, str],
    run_tags: Mapping[str, str],
    known: Mapping[dg.AssetKey, list[str | None]] | None = None,
    since: int | None = None,
    pending: Mapping[dg.AssetKey, int] | None = None,
    explain: Callable[[list[dg.AssetKey]], Mapping[dg.AssetKey, str]] | None = None,
    engine_stale: Mapping[dg.AssetKey, list[str | None]] | None = None,
    busy: set[dg.AssetKey] | None = None,
) -> StalePlan:
    """The stale partitions of the assets of `job_of`, and runs (in the job each asset belongs to)
    for those whose upstream is fresh and idle, tagged with what they rebuild and why. `known`:
    the stale partitions a tick found when the event log ended at storage id `since` (same code
    versions); only what may have changed since is asked again (see sensors.stale_changes).
    `pending`: the partitions not read yet (asset -> index of its next partition): a first reading
    of every status stops after `SCAN_SECONDS` and goes on at the next tick; runs are planned
    once it is complete. `explain`: the engine's words for why the ready assets are rebuilt (it
    replaces Dagster's stale causes where it has a line). `engine_stale`: the stale partitions of the
    partitioned models the engine told (engine.reads.partition_staleness, one scan per model): Dagster is
    not asked about those. `busy`: the assets of queued or running runs, read before `engine_stale`
    was (else now)."""
    # Runs first, then stale status: a run that finishes in between is seen as busy (its assets
    # wait a tick), never as stale-and-idle (which would launch it twice).
    if busy is None:
        busy = _assets_in_progress(instance, job_of)
    resolver = StaleStatusReader(instance, asset_graph)
    plan = StalePlan()
    told = dict(engine_stale or {})
    scan = StaleScan(
        dict(known or {}), dict(pending or {}) if known is not None else dict.fromkeys(job_of, 0)
    )
    if known is not None and since is not None:
        changed = may_have_changed(asset_graph, touched_since(instance, asset_graph, since))
        changed = {item for item in changed if item.asset_key not in told}
        scan.stale = _stale_since(asset_graph, resolver, job_of, scan.stale, changed)
    for key, partitions in told.items():
        scan.pending.pop(key, None)
        scan.stale[key] = list(partitions)
    _continue_scan(instance, asset_graph, resolver, scan)
    plan.pending = scan.pending
    found = scan.stale
    plan.status_stale = {key: parts for key, parts in found.items() if parts}
    for key in job_of:
        node = asset_graph.get(key)
        refresh = refresh_of(node)
        if is_due(instance, key, refresh):
            plan.stale[key] = list(_partitions(instance, node))  # a refresh rebuilds the whole model
            plan.why[key] = f"its refresh period ({refresh}) has passed"
        elif found.get(key):
            plan.stale[key] = found[key]
            plan.why[key] = resolver.why(key, found[key])
    if plan.pending:
        return plan  # an upstream partition not read yet may be stale: no run before it is
    ready = [
        key
        for key in plan.stale
        if key not in busy
        and not any(parent in plan.stale or parent in busy for parent in _upstream(asset_graph, key, job_of))
    ]
    if explain is not None and ready:
        plan.why.update(explain(ready))
    unpartitioned = sorted((key for key in ready if plan.stale[key] == [None]), key=str)
    for job in sorted({job_of[key] for key in unpartitioned}):
        selection = [key for key in unpartitioned if job_of[key] == job]
        why = "; ".join(f"{key.to_user_string()}: {plan.why[key]}" for key in selection)
        plan.runs.append(
            dg.RunRequest(job_name=job, asset_selection=selection, tags=_rebuild_tags(run_tags, why))
        )
    for key in sorted((key for key in ready if plan.stale[key] != [None]), key=str):
        partitions_def = asset_graph.get(key).partitions_def
        subset = partitions_def.subset_with_partition_keys(plan.stale[key])
        for key_range in subset.get_partition_key_ranges(partitions_def):
            in_range = partitions_def.get_partition_keys_in_range(key_range)
            tags = {
                **_rebuild_tags(run_tags, plan.why[key]),
                c.STALE_PARTITIONS_TAG: str(len(in_range)),
                RANGE_START_TAG: key_range.start,
                RANGE_END_TAG: key_range.end,
            }
            plan.runs.append(dg.RunRequest(job_name=job_of[key], asset_selection=[key], tags=tags))
    return plan


def _partitions(instance: dg.DagsterInstance, node) -> Sequence[str | None]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    if node.partitions_def is None:
        return [None]
    return node.partitions_def.get_partition_keys(dynamic_partitions_store=instance)


def _continue_scan(
    instance: dg.DagsterInstance,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    resolver: StaleStatusReader,
    scan: StaleScan,
) -> None:
    """Read pending statuses until none is left, or `SCAN_SECONDS` have passed and at least
    `SCAN_MIN_PARTITIONS` were read."""
    deadline = time.monotonic() + SCAN_SECONDS
    read = 0
    for key in sorted(scan.pending, key=str):
        partitions = _partitions(instance, asset_graph.get(key))
        index = scan.pending[key]
        found = set(scan.stale.get(key, ()))
        while index < len(partitions):
            if resolver.is_stale(key, partitions[index]):
                found.add(partitions[index])
            index += 1
            read += 1
            if read >= SCAN_MIN_PARTITIONS and time.monotonic() > deadline:
                break
        if found:
            scan.stale[key] = sorted(found, key=lambda p: p or "")
        if index < len(partitions):
            scan.pending[key] = index
            return
        del scan.pending[key]


def _stale_since(
    asset_graph: Any,  # Dagster's asset graph and node types are private
    resolver: StaleStatusReader,
    job_of: Mapping[dg.AssetKey, str],
    known: Mapping[dg.AssetKey, Sequence[str | None]],
    changed: set[AssetPartition],
) -> dict[dg.AssetKey, list[str | None]]:
    """`known`, with the status of the `changed` partitions asked again."""
    stale = {key: {p for p in known.get(key, ()) if AssetPartition(key, p) not in changed} for key in job_of}
    for item in changed:
        if item.asset_key in stale and resolver.is_stale(item.asset_key, item.partition_key):
            stale[item.asset_key].add(item.partition_key)
    return {key: sorted(partitions, key=lambda p: p or "") for key, partitions in stale.items() if partitions}


def _rebuild_tags(run_tags: Mapping[str, str], why: str) -> dict[str, str]:
    return {**run_tags, c.PURPOSE_TAG: c.PURPOSE_REBUILD, c.WHY_TAG: _short(why)}


def _short(text: str) -> str:
    return text if len(text) <= _TAG_LENGTH else text[: _TAG_LENGTH - 3] + "..."


def describe_run(request: dg.RunRequest) -> str:
    """One line naming what a run request materializes (or observes) and why."""
    names = ", ".join(key.to_user_string() for key in request.asset_selection or ())
    start = request.tags.get(RANGE_START_TAG)
    if start is not None:
        count = request.tags.get(c.STALE_PARTITIONS_TAG)
        names += f" [{start}..{request.tags[RANGE_END_TAG]}] ({count} partitions)"
    verb = "observe" if request.tags.get(c.PURPOSE_TAG) == c.PURPOSE_OBSERVE else "materialize"
    return f"{verb} {names}: {request.tags.get(c.WHY_TAG, '')}"


def _upstream(asset_graph, key: dg.AssetKey, job_of: Mapping[dg.AssetKey, str]) -> set[dg.AssetKey]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
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


@dataclass(frozen=True)
class _TickState:
    """The sensor's cursor: the event log's last storage id and the assets' code versions when a
    tick read the stale status, and the stale partitions it found (None: not computed). With the
    same code versions, the next tick asks again only what events since may have changed."""

    last_event: int | None
    code: str
    stale: dict[dg.AssetKey, list[str | None]] | None = None
    pending: dict[dg.AssetKey, int] = field(default_factory=dict)  # not read yet (see StaleScan)
    # check -> digest of the source checks' results the arrival step last reported (sensors.arrivals)
    reported: dict[str, str] = field(default_factory=dict)

    def dump(self) -> str:
        stale = (
            None if self.stale is None else {key.to_user_string(): parts for key, parts in self.stale.items()}
        )
        pending = {key.to_user_string(): index for key, index in self.pending.items()}
        return json.dumps(
            {
                "last_event": self.last_event,
                "code": self.code,
                "stale": stale,
                "pending": pending,
                "reported": self.reported,
            }
        )

    @staticmethod
    def load(raw: str | None) -> "_TickState | None":
        try:
            data = json.loads(raw or "")
            stale = data["stale"]
            return _TickState(
                data["last_event"],
                data["code"],
                None if stale is None else {dg.AssetKey.from_user_string(k): v for k, v in stale.items()},
                {dg.AssetKey.from_user_string(k): v for k, v in data["pending"].items()},
                dict(data.get("reported") or {}),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # no cursor yet, or one an older version wrote


def _skip_text(result: dg.SensorResult) -> str:
    reason = result.skip_reason
    return "" if reason is None else reason.skip_message or ""


def _with_reported(cursor: str | None, code: str, reported: dict[str, str]) -> str:
    """`cursor` with the check results the arrival step reported (a fresh state when there is none)."""
    loaded = _TickState.load(cursor) or _TickState(None, code)
    merged = {key: value for key, value in loaded.reported.items() if not key.startswith(REPORTED_PREFIX)}
    merged.update((key, value) for key, value in reported.items() if key.startswith(REPORTED_PREFIX))
    return _TickState(loaded.last_event, loaded.code, loaded.stale, loaded.pending, merged).dump()


def _tick_state(instance: dg.DagsterInstance, asset_graph, job_of: Mapping[dg.AssetKey, str]) -> _TickState:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    versions = sorted((str(key), asset_graph.get(key).code_version or "") for key in job_of)
    code = hashlib.sha256(json.dumps(versions).encode()).hexdigest()[:16]
    return _TickState(instance.event_log_storage.get_maximum_record_id(), code)


def stale_partitions_sensor(
    jobs: Sequence[Any],
    job_of: Mapping[dg.AssetKey, str],
    observable: Mapping[dg.AssetKey, str | None],
    strata: StrataResource,
    *,
    observe_job: str = OBSERVE_JOB,
    name: str = STALE_SENSOR_NAME,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    minimum_interval_seconds: int = 5,
    run_tags: Mapping[str, str] | None = None,
    whole_models: Mapping[dg.AssetKey, str] | None = None,
    partitioned: Mapping[dg.AssetKey, PartitionedModel] | None = None,
    arriving: Sequence[ArrivingSource] = (),
) -> dg.SensorDefinition:
    """The sensor over the assets of `job_of` (asset -> the job, one per partitions definition,
    that materializes it). `observable`: the observable assets job `observe_job` observes, each
    with the source whose fingerprint is its data version (None: a companion its model's builds
    observe; observed by the sensor only if never observed, or, for the `<model>__whole`
    companions in `whole_models` (companion -> model), when the model's live content differs
    from the companion's data version); `strata`: where the project and warehouse are, for
    those fingerprints. `partitioned`: the models built partition by
    partition, whose stale partitions the engine tells in one scan each (instead of Dagster,
    partition by partition) and which the tick reports as their `strata_stale_partitions` check
    when the answer changed."""
    tags = {"strata/sensor": name, **(run_tags or {})}

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        default_status=default_status,
        minimum_interval_seconds=minimum_interval_seconds,
        description=(
            "Materializes exactly the stale asset partitions, upstream first, as ranged runs; observes "
            "a strata source when its content fingerprint changed. Test it to preview the runs."
        ),
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        instance = context.instance
        graph = context.repository_def.asset_graph  # type: ignore[union-attr]  # a sensor always runs in a repository
        state = _tick_state(instance, graph, job_of)  # before anything is read: later events count next tick
        busy = _assets_in_progress(instance, job_of)
        loaded = _TickState.load(context.cursor)
        try:
            step = arrival_step(
                instance, strata, graph, arriving, job_of, busy, loaded.reported if loaded else {}, tags
            )
        except StrataError as error:
            context.log.warning(error.render())
            return dg.SensorResult(
                skip_reason=f"Skipped: sources not listed, {error.render()} (the next tick tries again)",
                cursor=context.cursor,
            )
        if step.has_arrivals:
            for request in step.runs:
                context.log.info(describe_run(request))
            return dg.SensorResult(
                run_requests=step.runs,
                asset_events=step.events,
                dynamic_partitions_requests=step.partitions,
                cursor=_with_reported(context.cursor, state.code, step.reported),
            )
        watched = {source.whole_key for source in arriving}
        result = _tick(
            context,
            graph,
            state,
            busy,
            {key: job for key, job in job_of.items() if key not in step.blocked},
            {key: name for key, name in observable.items() if key not in watched and key not in step.blocked},
            {key: found for key, found in (partitioned or {}).items() if key not in step.blocked},
        )
        if not step.events and not step.lines and step.reported == (loaded.reported if loaded else {}):
            return result
        for event in step.events:
            context.log.info(f"{event.asset_key.to_user_string()}: {getattr(event, 'description', '')}")
        return dg.SensorResult(
            run_requests=result.run_requests,
            skip_reason=" ".join([*(f"{line}." for line in step.lines), _skip_text(result)]).strip()
            if not result.run_requests
            else None,
            asset_events=[*step.events, *result.asset_events],
            cursor=_with_reported(result.cursor, state.code, step.reported),
        )

    def _tick(
        context: dg.SensorEvaluationContext,
        graph: Any,  # Dagster's asset graph and node types are private
        state: _TickState,
        busy: set[dg.AssetKey],
        job_of: Mapping[dg.AssetKey, str],
        observable: Mapping[dg.AssetKey, str | None],
        partitioned: Mapping[dg.AssetKey, PartitionedModel],
    ) -> dg.SensorResult:
        instance = context.instance
        try:
            sources = check_sources(instance, strata, observable, busy, whole_models)
        except StrataError as error:
            context.log.warning(error.render())
            return dg.SensorResult(
                skip_reason=f"Skipped: sources not checked, {error.render()} (the next tick tries again)",
                cursor=context.cursor,
            )
        if sources.to_observe:
            why = "; ".join(sources.reasons)
            observe_tags = {**tags, c.PURPOSE_TAG: c.PURPOSE_OBSERVE, c.WHY_TAG: _short(why)}
            request = dg.RunRequest(
                job_name=observe_job, asset_selection=sources.to_observe, tags=observe_tags
            )
            context.log.info(f"{describe_run(request)} (stale assets follow once observed)")
            return dg.SensorResult(run_requests=[request], cursor=context.cursor)
        due = any(is_due(instance, key, refresh_of(graph.get(key))) for key in job_of)
        previous = _TickState.load(context.cursor)
        if previous is not None and previous.code != state.code:
            previous = None  # new code versions: every status may differ
        if (
            not due
            and previous is not None
            and previous.last_event == state.last_event
            and previous.stale == {}
            and not previous.pending
        ):
            return dg.SensorResult(
                skip_reason=(
                    f"Nothing to do: {sources.unchanged} sources unchanged, and nothing was materialized "
                    "or observed since the last tick found every asset fresh."
                ),
                cursor=context.cursor,
            )
        known = None if previous is None else previous.stale
        since = None if previous is None else previous.last_event
        pending = None if previous is None else previous.pending
        try:
            told = read_engine_stale(
                strata, graph, partitioned or {}, instance, dagster_is_stale(instance, graph)
            )
        except StrataError as error:
            context.log.warning(error.render())
            return dg.SensorResult(
                skip_reason=f"Skipped: stale partitions not read, {error.render()} (the next tick tries again)",
                cursor=context.cursor,
            )
        # `busy` was read before the engine's answer, as the plan reads runs before stale statuses.
        plan = plan_stale_runs(
            instance,
            graph,
            job_of,
            tags,
            known,
            since,
            pending,
            explain=lambda keys: _engine_why(context, strata, graph, keys),
            engine_stale=told.stale,
            busy=busy,
        )
        loaded = _TickState.load(context.cursor)
        reported = dict(loaded.reported) if loaded is not None else {}
        events = unshown(instance, told.evaluations)
        cursor = _TickState(state.last_event, state.code, plan.status_stale, plan.pending, reported).dump()
        for request in plan.runs:
            context.log.info(describe_run(request))
        if plan.runs:
            return dg.SensorResult(run_requests=plan.runs, cursor=cursor, asset_events=events)
        return dg.SensorResult(
            skip_reason=_idle_reason(plan, busy, sources.unchanged), cursor=cursor, asset_events=events
        )

    return _sensor


def _engine_why(
    context: dg.SensorEvaluationContext,
    strata: StrataResource,
    graph: Any,  # Dagster's asset graph and node types are private
    keys: list[dg.AssetKey],
) -> dict[dg.AssetKey, str]:
    """`strata plan`'s line for each asset's model; Dagster's causes stay when the plan cannot be read."""
    try:
        return engine_why(strata, graph, keys, LOCK_WAIT_SECONDS)
    except StrataError as error:
        context.log.warning(f"why in the engine's words not read: {error.render()}")
        return {}


def _idle_reason(plan: StalePlan, busy: set[dg.AssetKey], unchanged: int) -> str:
    if plan.pending:
        assets = ", ".join(sorted(key.to_user_string() for key in plan.pending))
        return f"Reading Dagster's stale status, continued next tick (not read yet: partitions of {assets})."
    if plan.stale:
        waiting = ", ".join(sorted(key.to_user_string() for key in plan.stale))
        return f"Stale, waiting for their upstream runs to finish: {waiting}."
    if busy:
        return f"Nothing stale; {len(busy)} assets in queued or running runs."
    return f"Nothing to do: {unchanged} sources unchanged, every asset fresh."
