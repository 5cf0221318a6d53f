"""Jobs that do in one run what a Dagster backfill does in many: `strata_materialize_all` (the first
load: observe the sources, then materialize every asset and partition) and `strata_backfill_range`
(a backfill of a range of partitions of some partitioned assets).

Why they exist: a Dagster backfill is advanced by the backfill daemon, which iterates every 30 s
(a constant of Dagster's, not a setting), and one run cannot hold assets of different partitions
definitions. So *Materialize all* of unpartitioned, daily and monthly models waits a daemon
iteration before each level, and each level is a new run process; a backfill of a few partitions
waits for one iteration before its run starts.

How: the run goes through the same waves, upstream first: each wave is a Dagster run of the asset
job of one partitioning (the same assets, IO manager, checks, events and provenance as when that
job is launched alone: per-partition data versions, companions, staleness), executed in this
run's process as soon as the previous wave ended, tagged `strata/launched_by` with this run's id.
This run's step holds the `duckdb` pool slot meanwhile, so no other strata run writes in between.
A backfill (`strata_backfill_range`, or tags that correct) needs `strata/reason` like any other
(E085, refused before any step); its waves are runs of the `strata_backfill_*` jobs.
"""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from graphlib import TopologicalSorter
from typing import Any

import dagster as dg
from pydantic import Field

from strata_dagster.errors import E_RANGE_RUN, StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.failures import as_failure
from strata_dagster.orchestration.naming import ProjectNames

LAUNCHED_BY_TAG = c.LAUNCHED_BY_TAG
PURPOSE_MATERIALIZE_ALL = "materialize_all"
PURPOSE_BACKFILL = "backfill"


@dataclass(frozen=True)
class Wave:
    """One run of the waves: `keys` of asset job `job`, over the partitions `first`..`last`
    (None: unpartitioned)."""

    job: str
    keys: tuple[dg.AssetKey, ...]
    first: str | None = None
    last: str | None = None
    is_observation: bool = False

    def describe(self) -> str:
        names = ", ".join(key.to_user_string() for key in self.keys)
        span = "" if self.first is None else f" [{self.first}..{self.last}]"
        return f"{self.job} ({names}){span}"


class DefinitionsRef:
    """The definitions the waves' jobs are resolved from, set once they are built (the jobs of this
    module are part of them)."""

    def __init__(self) -> None:
        self._defs: dg.Definitions | None = None

    def set(self, defs: dg.Definitions) -> None:
        self._defs = defs

    def get(self) -> dg.Definitions:
        assert self._defs is not None, "the definitions were not built"
        return self._defs


class BackfillRangeConfig(dg.Config):
    """A backfill of the partitions `first`..`last` (partition keys, both included) of `assets`."""

    assets: list[str] = Field(
        description="The partitioned assets to backfill (`daily_revenue`; a key with a prefix as `a/b`)."
    )
    first: str = Field(description="The first partition key of the range, e.g. 2025-01-01.")
    last: str = Field(description="The last partition key of the range (included), e.g. 2025-01-03.")


def wave_plan(asset_graph, job_of: Mapping[dg.AssetKey, str]) -> list[tuple[str, tuple[dg.AssetKey, ...]]]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """The assets of `job_of` (asset -> its job) as waves (job, assets), upstream first. An asset
    joins a wave once every asset of another job it reads from (directly, or through assets in no
    job: companions, sources) is in an earlier wave; within a wave its job's run orders the rest."""
    parents = {key: _job_parents(asset_graph, key, job_of) for key in job_of}
    sorter = TopologicalSorter(parents)
    order = list(sorter.static_order())
    done: set[dg.AssetKey] = set()
    waves: list[tuple[str, tuple[dg.AssetKey, ...]]] = []
    while len(done) < len(job_of):
        blocked: dict[dg.AssetKey, bool] = {}
        ready: dict[str, list[dg.AssetKey]] = {}
        for key in order:
            if key in done:
                continue
            blocked[key] = any(
                parent not in done and (job_of[parent] != job_of[key] or blocked[parent])
                for parent in parents[key]
            )
            if not blocked[key]:
                ready.setdefault(job_of[key], []).append(key)
        for job in sorted(ready):
            waves.append((job, tuple(sorted(ready[job], key=str))))
            done.update(ready[job])
    return waves


def _job_parents(asset_graph, key: dg.AssetKey, job_of: Mapping[dg.AssetKey, str]) -> set[dg.AssetKey]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """The assets of `job_of` that `key` reads, directly or through assets in no job."""
    found: set[dg.AssetKey] = set()
    seen: set[dg.AssetKey] = set()
    pending = [parent for parent in asset_graph.get(key).parent_keys if parent != key]
    while pending:
        parent = pending.pop()
        if parent in seen or not asset_graph.has(parent):
            continue
        seen.add(parent)
        if parent in job_of:
            found.add(parent)
        else:
            pending.extend(asset_graph.get(parent).parent_keys)
    return found


def materialize_all_waves(
    asset_graph: Any,  # Dagster's asset graph and node types are private
    job_of: Mapping[dg.AssetKey, str],
    observe_job: str,
    observable: Sequence[dg.AssetKey],
    instance: dg.DagsterInstance,
) -> list[Wave]:
    """An observation of the sources, then every asset of every job over all its partitions."""
    waves = [Wave(observe_job, tuple(observable), is_observation=True)] if observable else []
    for job, keys in wave_plan(asset_graph, job_of):
        partitions_def = asset_graph.get(keys[0]).partitions_def
        if partitions_def is None:
            waves.append(Wave(job, keys))
            continue
        partitions = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
        if partitions:  # no partition yet (no data): nothing to materialize
            waves.append(Wave(job, keys, partitions[0], partitions[-1]))
    return waves


def backfill_range_waves(
    asset_graph: Any,  # Dagster's asset graph and node types are private
    backfill_job_of: Mapping[dg.AssetKey, str],
    config: BackfillRangeConfig,
    instance: dg.DagsterInstance,
) -> list[Wave]:
    """One run of the backfill job of each partitioning of `config.assets`, upstream first; E068
    for an asset that is not a partitioned strata model or a range it does not have."""
    wanted: dict[dg.AssetKey, str] = {}
    for name in config.assets:
        key = dg.AssetKey.from_user_string(name)
        job = backfill_job_of.get(key)
        partitions_def = asset_graph.get(key).partitions_def if asset_graph.has(key) else None
        if job is None or partitions_def is None:
            partitioned = sorted(
                item.to_user_string()
                for item in backfill_job_of
                if asset_graph.has(item) and asset_graph.get(item).partitions_def is not None
            )
            raise StrataError(
                E_RANGE_RUN,
                f"`{name}` is not a partitioned strata model",
                hint="name partitioned models in `assets`: " + ", ".join(partitioned),
            )
        known = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
        missing = [item for item in (config.first, config.last) if item not in known]
        if missing or known.index(config.first) > known.index(config.last):
            raise StrataError(
                E_RANGE_RUN,
                f"`{config.first}`..`{config.last}` is not a range of partitions of `{name}`"
                + (f" (no partition `{missing[0]}`)" if missing else " (first after last)"),
                hint=f"its partitions run from `{known[0]}` to `{known[-1]}`"
                if known
                else "it has no partition yet",
            )
        wanted[key] = job
    return [Wave(job, keys, config.first, config.last) for job, keys in wave_plan(asset_graph, wanted)]


def run_waves(
    context: dg.OpExecutionContext,
    defs: dg.Definitions,
    waves: Sequence[Wave],
    purpose: str,
) -> dg.Output[None]:
    """Execute `waves` one after the other as runs in this process; a failed one stops the rest
    (a `Failure` naming it; its own run has the error)."""
    tags = {
        **{key: value for key, value in context.run.tags.items() if not key.startswith("dagster/")},
        LAUNCHED_BY_TAG: context.run_id,
    }
    done: list[dict[str, object]] = []
    for number, wave in enumerate(waves, start=1):
        began = time.perf_counter()
        wave_tags = {
            **tags,
            c.PURPOSE_TAG: c.PURPOSE_OBSERVE if wave.is_observation else purpose,
        }
        if wave.first is not None:
            wave_tags.update({c.RANGE_START_TAG: wave.first, c.RANGE_END_TAG: str(wave.last)})
        result = defs.resolve_job_def(wave.job).execute_in_process(
            instance=context.instance,
            asset_selection=list(wave.keys),
            tags=wave_tags,
            raise_on_error=False,
        )
        seconds = round(time.perf_counter() - began, 2)
        step = f"wave {number}/{len(waves)}: {wave.describe()}, run {result.run_id}"
        done.append({"wave": wave.describe(), "run_id": result.run_id, "seconds": seconds})
        if not result.success:
            raise dg.Failure(
                description=f"{step} failed; its run's log says why. Later waves were not run.",
                metadata={"strata/failed_run": result.run_id, "strata/waves": dg.MetadataValue.json(done)},
            )
        context.log.info(f"{step}: succeeded in {seconds:.1f}s")
    return dg.Output(None, metadata={"strata/waves": dg.MetadataValue.json(done), "strata/runs": len(done)})


def build_one_run_jobs(
    ref: DefinitionsRef,
    job_of: Mapping[dg.AssetKey, str],
    observe_job: str,
    observable: Sequence[dg.AssetKey],
    backfill_job_of: Mapping[dg.AssetKey, str],
    names: ProjectNames,
    executor: dg.ExecutorDefinition,
) -> list[dg.JobDefinition]:
    """`strata_materialize_all` and `strata_backfill_range` over the jobs of `job_of` and
    `backfill_job_of` (asset -> job), resolved from the definitions `ref` holds."""

    @dg.op(name=names.materialize_all_op, pool=c.DUCKDB_POOL, out=dg.Out(dg.Nothing))
    def _materialize_all(context: dg.OpExecutionContext) -> dg.Output[None]:
        defs = ref.get()
        waves = materialize_all_waves(
            defs.resolve_asset_graph(), job_of, observe_job, observable, context.instance
        )
        context.log.info("waves: " + "; ".join(wave.describe() for wave in waves))
        return run_waves(context, defs, waves, PURPOSE_MATERIALIZE_ALL)

    @dg.op(name=names.backfill_range_op, pool=c.DUCKDB_POOL, out=dg.Out(dg.Nothing))
    def _backfill_range(context: dg.OpExecutionContext, config: BackfillRangeConfig) -> dg.Output[None]:
        defs = ref.get()
        try:
            waves = backfill_range_waves(
                defs.resolve_asset_graph(), backfill_job_of, config, context.instance
            )
        except StrataError as error:
            raise as_failure(error) from None
        return run_waves(context, defs, waves, PURPOSE_BACKFILL)

    @dg.job(
        name=names.materialize_all_job,
        executor_def=executor,
        description=(
            "The first load, fast: observes the sources and materializes every strata asset and "
            "partition in one run, in about the time of `strata run` plus one run's start. It runs "
            f"`{observe_job}`, then the asset job of each partitioning upstream first, each over all "
            f"its partitions, as runs inside this one (tagged `{LAUNCHED_BY_TAG}`). 'Materialize all' "
            "in the asset graph does the same as a Dagster backfill, each of whose levels waits for "
            f"{c.BACKFILL_DAEMON_WAIT}. Needs no tag; a `{c.REASON_TAG}` is recorded."
        ),
        tags={c.PURPOSE_TAG: PURPOSE_MATERIALIZE_ALL},
    )
    def _materialize_all_job() -> None:
        _materialize_all()

    @dg.job(
        name=names.backfill_range_job,
        executor_def=executor,
        description=(
            "A fast backfill of a range of partitions: config `assets`, `first`, `last` (Launchpad); "
            f"no wait for {c.BACKFILL_DAEMON_WAIT}, as a partition dialog's backfill has. "
            "Each partitioning's backfill job runs inside this run over "
            f"`first`..`last` (tagged `{LAUNCHED_BY_TAG}`), rebuilding exactly those partitions "
            f"as `strata backfill --partitions` does. Needs the run tag `{c.REASON_TAG}` (E085 "
            "otherwise, refused before any step); the other backfill tags apply too."
        ),
        tags={c.PURPOSE_TAG: PURPOSE_BACKFILL},
    )
    def _backfill_range_job() -> None:
        _backfill_range()

    return [_materialize_all_job, _backfill_range_job]
