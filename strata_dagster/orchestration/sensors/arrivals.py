"""The stale sensor's first step: new partitions of business-versioned sources, picked up in one tick.

Each tick lists every business-versioned source (engine.reads.arrivals: the listing and the ledger, no
row read) and compares the version the next run would record with the data version Dagster last
recorded for the source's `__whole` companion. When they differ (a complete partition arrived, or
the source was never observed) the same tick:

- records the observations itself, with no observation run: the companion's new version, and
  one data version per new partition on the source's partitioned asset (from its evidence);
- adds the new keys of an integer-keyed source to its dynamic partitions;
- requests exactly the new partitions of the models cut like the source (the partitions a build
  recomputes, as the engine tells them; all complete ones for a model never built by partitions),
  as ranged runs, and one run (per job) of the unpartitioned models that read the sources.

A folder without its `complete_when` marker has no version yet, so nothing changes until it is
complete. A new partition observed by an earlier tick and still not consumed while nothing reading
the source runs is launched again (its runs failed). A listing that breaks an assumption under `on_violation: error` is reported as a failed
`strata_partition_assumptions` check (with its code) when that result changes; nothing reading the
source is observed or launched until it passes again. While a run of a model reading the source is
queued or running, the source waits: the run may or may not consume the new partitions, and an
observation recorded before its materialization would make Dagster believe it did.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from strata_dagster.engine.reads.arrivals import SourceArrivals, peek_arrivals
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.source_checks import ASSUMPTIONS_CHECK, assumption_evaluation
from strata_dagster.orchestration.constants import LOCK_WAIT_SECONDS
from strata_dagster.orchestration.resources.strata import StrataResource

REPORTED_PREFIX = f"{ASSUMPTIONS_CHECK}:"  # cursor entries of the checks a tick reported
_NAMED = 10  # partitions named in a run's `strata/why`
# Runs launched again for one arrival whose runs failed, at most (then a person looks at why).
MAX_RELAUNCHES = 3
_FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@dataclass(frozen=True)
class ArrivingSource:
    """A business-versioned source as the sensor watches it."""

    name: str
    key: dg.AssetKey  # its partitioned asset
    whole_key: dg.AssetKey  # its `__whole` companion, whose data version is the source's version
    cut_like: Mapping[dg.AssetKey, tuple[str, str]]  # models cut like it: asset -> (model, grain)
    readers: tuple[dg.AssetKey, ...]  # the unpartitioned models that read it


@dataclass
class ArrivalStep:
    """What the step found: events and runs for this tick, and what the rest of the tick leaves alone."""

    events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = field(default_factory=list)
    partitions: list[dg.AddDynamicPartitionsRequest] = field(default_factory=list)
    runs: list[dg.RunRequest] = field(default_factory=list)
    blocked: set[dg.AssetKey] = field(default_factory=set)  # downstream of a source failing its check
    reported: dict[str, str] = field(default_factory=dict)  # the check results now reported
    lines: list[str] = field(default_factory=list)
    readers: dict[dg.AssetKey, list[str]] = field(default_factory=dict)  # unpartitioned readers to run, why

    @property
    def has_arrivals(self) -> bool:
        return bool(self.runs) or any(isinstance(event, dg.AssetObservation) for event in self.events)


def arrival_step(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    sources: Sequence[ArrivingSource],
    job_of: Mapping[dg.AssetKey, str],
    busy: set[dg.AssetKey],
    reported: Mapping[str, str],
    run_tags: Mapping[str, str],
) -> ArrivalStep:
    """Observe and launch what arrived at `sources` (see the module). `reported`: the digests of
    the check results earlier ticks reported (cursor entries). Raises StrataError (E021 when a run
    holds the warehouse)."""
    step = ArrivalStep(reported=dict(reported))
    if not sources:
        return step
    recorded = {source.name: _recorded(instance, source.whole_key) for source in sources}
    # Sources a cut-like model of which last ran and failed: the partitions it still lacks are asked
    # of the engine (True) even when the source's version is the one recorded.
    failed = {source.name for source in sources if _has_failed_run(instance, source.cut_like)}
    found = peek_arrivals(
        strata.project_path,
        strata.warehouse_path,
        [source.name for source in sources],
        branch=strata.branch,
        timeout=LOCK_WAIT_SECONDS,
        known={name: True if name in failed else version for name, version in recorded.items()},
    )
    for source in sources:
        arrivals = found[source.name]
        _report_check(step, source, arrivals)
        if arrivals.is_blocked:
            step.blocked |= _downstream(asset_graph, {source.key, source.whole_key})
            step.lines.append(f"{source.name}: not observed, {arrivals.describe()}")
            continue
        is_observed = recorded[source.name] == arrivals.fingerprint
        if is_observed and not arrivals.new and source.name not in failed:
            continue
        readers = [*source.cut_like, *source.readers]
        if any(key in busy for key in readers):
            step.lines.append(f"{source.name}: new partitions wait for the runs of its readers to finish")
            continue
        if not is_observed:
            _observe(step, instance, asset_graph, source, arrivals, recorded[source.name] is None)
            _launch(step, asset_graph, source, arrivals, job_of, run_tags)
        elif _has_failed_too_often(instance, _jobs_of(source, job_of)):
            step.lines.append(
                f"{source.name}: the runs for {_named(arrivals.new or tuple(arrivals.versions))} failed "
                f"{MAX_RELAUNCHES} times in a row: not launched again until they are materialized by hand"
            )
        elif arrivals.new:
            # Observed and launched by an earlier tick, yet still not consumed with no reader
            # running: those runs failed (or were canceled). Launch them again.
            step.lines.append(
                f"{source.name}: {_named(arrivals.new)} not consumed by the runs launched for them"
            )
            _launch(step, asset_graph, source, arrivals, job_of, run_tags)
        else:
            # Consumed (another reader's run succeeded), but a cut-like model's last run failed:
            # the partitions the engine finds stale are launched again; the readers are current.
            _launch(step, asset_graph, source, arrivals, job_of, run_tags, with_readers=False)
    _launch_readers(step, job_of, run_tags)
    return step


def _has_failed_too_often(instance: dg.DagsterInstance, jobs: set[str]) -> bool:
    """Whether the last MAX_RELAUNCHES runs of a job that builds the source's partitions all
    failed: a cause that stays (bad data, a broken worker) would otherwise fail a run each tick."""
    for job in sorted(jobs):
        runs = instance.get_runs(filters=dg.RunsFilter(job_name=job), limit=MAX_RELAUNCHES)
        if len(runs) == MAX_RELAUNCHES and all(run.status in _FAILED for run in runs):
            return True
    return False


def _jobs_of(source: ArrivingSource, job_of: Mapping[dg.AssetKey, str]) -> set[str]:
    """The jobs that build the source's partitions (those of its readers when none is cut like it)."""
    keys = list(source.cut_like) or list(source.readers)
    return {job_of[key] for key in keys if key in job_of}


def _why(source: ArrivingSource, arrivals: SourceArrivals) -> str:
    return f"{source.name} has new partitions: " + _named(arrivals.new or tuple(arrivals.versions))


def _has_failed_run(instance: dg.DagsterInstance, keys: Iterable[dg.AssetKey]) -> bool:
    """Whether the latest run planned to materialize any of `keys` failed or was canceled."""
    for key in keys:
        planned = instance.get_latest_planned_materialization_info(key)
        run = None if planned is None else instance.get_run_by_id(planned.run_id)
        if run is not None and run.status in _FAILED:
            return True
    return False


def _recorded(instance: dg.DagsterInstance, key: dg.AssetKey) -> str | None:
    record = instance.get_latest_data_version_record(key, is_source=True)
    if record is None:
        return None
    tags = record.event_log_entry.tags
    if tags is None:  # a data version's record is an observation's or a materialization's: never
        raise AttributeError("'NoneType' object has no attribute 'get'")
    return tags.get(c.DATA_VERSION_TAG)


def _report_check(step: ArrivalStep, source: ArrivingSource, arrivals: SourceArrivals) -> None:
    """The source's check, when its outcome (pass, or which violations) differs from the last reported."""
    outcome = [arrivals.is_blocked, [(v.code, v.partition) for v in arrivals.violations]]
    digest = hashlib.sha256(json.dumps(outcome).encode()).hexdigest()[:16]
    entry = REPORTED_PREFIX + source.key.to_user_string()
    if step.reported.get(entry) != digest:
        step.reported[entry] = digest
        step.events.append(assumption_evaluation(source.key, arrivals))


def _observe(
    step: ArrivalStep,
    instance: dg.DagsterInstance,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    source: ArrivingSource,
    arrivals: SourceArrivals,
    is_first: bool,
) -> None:
    step.events.append(
        dg.AssetObservation(
            asset_key=source.whole_key,
            tags={c.DATA_VERSION_TAG: arrivals.fingerprint},
            metadata={
                c.ROWS_KEY: arrivals.row_count,
                c.RELATION_KEY: arrivals.relation,
                "dagster/row_count": arrivals.row_count,
                "last_partition": arrivals.last_partition or "",
                "new_partitions": list(arrivals.new),
                "waiting_partitions": list(arrivals.deferred),
            },
        )
    )
    changed = (
        set(arrivals.versions) if is_first else {*arrivals.new, *(v.partition for v in arrivals.violations)}
    )
    partitions_def = asset_graph.get(source.key).partitions_def
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        assert partitions_def.name is not None
        known = set(instance.get_dynamic_partitions(partitions_def.name))
        missing = [key for key in arrivals.versions if key not in known]
        if missing:
            step.partitions.append(dg.AddDynamicPartitionsRequest(partitions_def.name, missing))
        keys = set(arrivals.versions)
    else:
        keys = set(partitions_def.get_partition_keys())
    for key, version in arrivals.versions.items():
        if key in changed and key in keys:
            step.events.append(
                dg.AssetObservation(asset_key=source.key, partition=key, tags={c.DATA_VERSION_TAG: version})
            )
    later = sorted(key for key in changed if key not in keys)
    if later:
        step.lines.append(
            f"{source.name}: {', '.join(later[:_NAMED])} not partition keys yet (after the last complete day)"
        )


def _launch(
    step: ArrivalStep,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    source: ArrivingSource,
    arrivals: SourceArrivals,
    job_of: Mapping[dg.AssetKey, str],
    run_tags: Mapping[str, str],
    *,
    with_readers: bool = True,
) -> None:
    why = _why(source, arrivals)
    tags = {**run_tags, c.PURPOSE_TAG: c.PURPOSE_REBUILD, c.WHY_TAG: why}
    for key, (model, grain) in sorted(source.cut_like.items(), key=lambda item: str(item[0])):
        if key not in job_of or model not in arrivals.stale:
            continue  # not answered by partition (a sliding window's model): Dagster's staleness applies
        stale = arrivals.stale[model]
        wanted = {
            _at_grain(partition, grain) for partition in (arrivals.versions if stale is None else stale)
        }
        partitions_def = asset_graph.get(key).partitions_def
        existing = [partition for partition in partitions_def.get_partition_keys() if partition in wanted]
        if not existing:
            continue
        subset = partitions_def.subset_with_partition_keys(existing)
        for key_range in subset.get_partition_key_ranges(partitions_def):
            count = len(partitions_def.get_partition_keys_in_range(key_range))
            range_tags = {
                **tags,
                c.STALE_PARTITIONS_TAG: str(count),
                "dagster/asset_partition_range_start": key_range.start,
                "dagster/asset_partition_range_end": key_range.end,
            }
            step.runs.append(dg.RunRequest(job_name=job_of[key], asset_selection=[key], tags=range_tags))
    for key in source.readers if with_readers else ():
        if key in job_of:
            step.readers.setdefault(key, []).append(why)


def _launch_readers(
    step: ArrivalStep, job_of: Mapping[dg.AssetKey, str], run_tags: Mapping[str, str]
) -> None:
    """One run per job of the unpartitioned readers of every source that got new partitions."""
    readers = sorted(step.readers, key=str)
    for job in sorted({job_of[key] for key in readers}):
        selection = [key for key in readers if job_of[key] == job]
        why = "; ".join(dict.fromkeys(line for key in selection for line in step.readers[key]))
        tags = {**run_tags, c.PURPOSE_TAG: c.PURPOSE_REBUILD, c.WHY_TAG: _short(why)}
        step.runs.append(dg.RunRequest(job_name=job, asset_selection=selection, tags=tags))


def _short(text: str, length: int = 250) -> str:
    return text if len(text) <= length else text[: length - 3] + "..."


def _at_grain(partition: str, grain: str) -> str:
    day = partition[:10]
    return f"{day[:7]}-01" if grain == "month" else day


def _named(keys: Sequence[str]) -> str:
    return ", ".join(keys[:_NAMED]) + (f" and {len(keys) - _NAMED} more" if len(keys) > _NAMED else "")


def _downstream(asset_graph, keys: set[dg.AssetKey]) -> set[dg.AssetKey]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    found: set[dg.AssetKey] = set()
    stack = list(keys)
    while stack:
        key = stack.pop()
        if key in found:
            continue
        found.add(key)
        stack.extend(asset_graph.get(key).child_keys)
    return found
