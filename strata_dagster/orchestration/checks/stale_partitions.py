"""`strata_stale_partitions`: an asset check per partitioned model that names its stale partitions,
and the reading of them the stale sensor and every strata step share.

Dagster shows a partition's staleness only on that partition (the catalog, the asset's overview, the
lineage node and the partition bar say nothing about stale partitions). A check result is shown in
all of them: this one fails with severity WARN (a yellow badge) while the model is not up to date,
with the stale partitions' count and ranges in its metadata (`strata/stale_partitions`), and
passes only when a run would rebuild nothing of it.

Its answer is `strata plan --only-stale`'s for the model, computed by the same engine call (read-only,
well under a second at 3,650 daily partitions): the partitions a run would rebuild (exactly, when
the plan knows them), every partition (new code, a joined input changed, never built), or, when an
upstream model is rebuilt first and its rows decide which partitions change, "waits for" that
model. Never a pass while the plan would build something of the model.

What users see follows the warehouse, not only the runs that build the model: the check runs with
every materialization of its model and from its *Execute* button, and every strata step (a source's
observation, by hand, on a schedule or by automation; a model's build; a companion's observation)
re-evaluates it afterwards and records the result when it differs from the one shown
(`StaleCheckReporter`); so does the stale sensor's tick.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg

from strata_dagster.engine.paths import FULL, PARTITIONS, REUSED
from strata_dagster.engine.plan import CUTOFF_CANDIDATE, ModelPlan, plan
from strata_dagster.engine.reads.explain import partition_ranges
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.engine.run import RunRequest
from strata_dagster.errors import StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.provenance import is_stale_by_provenance
from strata_dagster.orchestration.checks.family import CheckFamily, planned_partitions
from strata_dagster.orchestration.constants import LOCK_WAIT_SECONDS
from strata_dagster.orchestration.resources.strata import StrataResource

STALE_PARTITIONS_CHECK: Final = "strata_stale_partitions"
_RANGES_SHOWN = 50  # ranges in the description and metadata; the count is always whole
_FIRST_BUILD = "first build"  # the engine's words for a model never built


@dataclass(frozen=True)
class PartitionedModel:
    """A partitioned SQL model built partition by partition, as its check sees it."""

    model: str
    grain: str
    partitions_def: dg.PartitionsDefinition


def partitioned_models_of(asset_graph: Any) -> dict[dg.AssetKey, PartitionedModel]:
    """The models with a `strata_stale_partitions` check in a definitions' asset graph."""
    found = {}
    for check_key in asset_graph.asset_check_keys:
        if check_key.name != STALE_PARTITIONS_CHECK or not asset_graph.has(check_key.asset_key):
            continue
        node = asset_graph.get(check_key.asset_key)
        metadata = node.metadata or {}
        model = getattr(metadata.get(c.MODEL_KEY), "value", metadata.get(c.MODEL_KEY))
        spec = str(getattr(metadata.get(c.PARTITIONED_BY_KEY), "value", metadata.get(c.PARTITIONED_BY_KEY)))
        if model and node.partitions_def is not None:
            found[check_key.asset_key] = PartitionedModel(str(model), spec.split("(")[0], node.partitions_def)
    return found


@dataclass(frozen=True)
class StaleAnswer:
    """What `strata plan --only-stale` says of one partitioned model: the partitions a run rebuilds
    (`keys`, all of them when `is_all`), why, and the upstream models rebuilt first whose rows
    decide the rest (`waits_for`). `is_missing`: never built (every partition missing)."""

    model: str
    keys: tuple[str, ...] = ()
    reason: str = ""
    is_all: bool = False
    waits_for: tuple[str, ...] = ()
    is_missing: bool = False

    @property
    def is_fresh(self) -> bool:
        return not self.keys and not self.waits_for and not self.is_missing


def plan_answers(
    strata: StrataResource,
    models: Mapping[dg.AssetKey, PartitionedModel],
    instance: dg.DagsterInstance | None,
    *,
    timeout: float | None = LOCK_WAIT_SECONDS,
) -> dict[dg.AssetKey, StaleAnswer]:
    """The plan's answer for each of `models` (one read-only plan of them and what they read).
    Raises StrataError (E021 when a run holds the warehouse past `timeout`)."""
    if not models:
        return {}
    request = RunRequest(
        project_dir=strata.project_path,
        warehouse=strata.warehouse_path,
        models=tuple(sorted({item.model for item in models.values()})),
        branch=strata.branch,
        only_stale=True,
    )
    planned = {item.model: item for item in plan(request, timeout=timeout).models}
    answers = {}
    for key, item in models.items():
        every = item.partitions_def.get_partition_keys(dynamic_partitions_store=instance)
        found = planned.get(item.model)
        answers[key] = StaleAnswer(item.model) if found is None else answer_of(found, every)
    return answers


def answer_of(planned: ModelPlan, every: Sequence[str]) -> StaleAnswer:
    """The check's answer from the plan of a model whose partitions are `every`."""
    name = planned.model
    if planned.depends_on:
        shown = ", ".join(f"`{ref}`" for ref in planned.depends_on)
        verb = "is" if len(planned.depends_on) == 1 else "are"
        return StaleAnswer(
            name,
            reason=f"{shown} {verb} stale and rebuilt first; the partitions whose rows it changes follow",
            waits_for=planned.depends_on,
        )
    if (planned.path == REUSED and not planned.publishes_again) or planned.path == CUTOFF_CANDIDATE:
        return StaleAnswer(name)
    known = set(every)
    if planned.path == PARTITIONS and planned.is_exact:
        changed = [change.name.partition(":")[2] for change in planned.changes if change.name != "code"]
        reason = f"{', '.join(changed) or 'its input'} has new rows in them"
        return StaleAnswer(name, tuple(key for key in planned.partition_keys if key in known), reason)
    if planned.path == FULL and not planned.changes and _FIRST_BUILD in planned.reason:
        return StaleAnswer(name, tuple(every), "never built", is_all=True, is_missing=True)
    return StaleAnswer(name, tuple(every), _whole_reason(planned), is_all=True)


def _whole_reason(planned: ModelPlan) -> str:
    """Why every partition is stale, in the check's words."""
    if planned.publishes_again:
        return "its live view shows an earlier state (a rollback or a promotion); a run publishes the current one again"
    reasons = []
    for change in planned.changes:
        kind, _, label = change.name.partition(":")
        reasons.append("its code changed" if kind == "code" else f"{label} has a new data version")
    return ", ".join(reasons) or planned.reason


def stale_result(model: str, grain: str, found: StaleAnswer) -> dict[str, Any]:
    """passed, severity, description and metadata of a model's check."""
    ranges = partition_ranges(found.keys, grain)
    shown = ", ".join(ranges[:_RANGES_SHOWN]) + (" ..." if len(ranges) > _RANGES_SHOWN else "")
    metadata: dict[str, Any] = {
        c.STALE_PARTITIONS_TAG: 0 if found.is_missing else len(found.keys),
        "stale_partition_ranges": [] if found.is_missing else list(ranges[:_RANGES_SHOWN]),
        c.MODEL_KEY: model,
    }
    if found.is_fresh:
        return {"passed": True, "description": f"no stale partition of `{model}`", "metadata": metadata}
    metadata["reason"] = found.reason
    if found.waits_for:
        metadata["waits_for"] = list(found.waits_for)
        description = f"`{model}` is not up to date: {found.reason}"
    elif found.is_missing:
        metadata["missing_partitions"] = len(found.keys)
        description = f"`{model}` was never built: its {len(found.keys)} partition(s) are missing"
    else:
        description = f"{len(found.keys)} stale partition(s) of `{model}` ({found.reason}): {shown}"
    return {
        "passed": False,
        "severity": dg.AssetCheckSeverity.WARN,
        "description": description,
        "metadata": metadata,
    }


def stale_evaluations(
    models: Mapping[dg.AssetKey, PartitionedModel], answers: Mapping[dg.AssetKey, StaleAnswer]
) -> dict[dg.AssetKey, dg.AssetCheckEvaluation]:
    """The check's evaluation for each model of `models` that has an answer."""
    evaluations = {}
    for key, item in models.items():
        if key not in answers:
            continue
        fields = stale_result(item.model, item.grain, answers[key])
        evaluations[key] = dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=STALE_PARTITIONS_CHECK,
            passed=fields["passed"],
            severity=fields.get("severity", dg.AssetCheckSeverity.ERROR),
            description=fields["description"],
            metadata=fields["metadata"],
        )
    return evaluations


def digest(passed: bool, description: str | None) -> str:
    """What identifies a result as users see it: passed or not, and its description."""
    text = json.dumps([passed, description], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EngineStale:
    """What a sensor tick read: the stale partitions of each model built by partitions (for its
    runs: the engine's, confirmed by Dagster's status when partial) and the checks' evaluations
    (the plan's answer)."""

    stale: dict[dg.AssetKey, list[str | None]] = field(default_factory=dict)
    evaluations: dict[dg.AssetKey, dg.AssetCheckEvaluation] = field(default_factory=dict)


def read_engine_stale(
    strata: StrataResource,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    partitioned: Mapping[dg.AssetKey, PartitionedModel],
    instance: dg.DagsterInstance,
    is_stale: Callable[[dg.AssetKey, str], bool],
    *,
    timeout: float | None = LOCK_WAIT_SECONDS,
) -> EngineStale:
    """The stale partitions of `partitioned` the engine tells (engine.reads.partition_staleness: the
    partitions whose input rows changed, one grouped scan per model), keyed as the assets'
    partitions are; `is_stale`: Dagster's status of one asset partition, which confirms a partial
    answer before a run is requested for it (a partition whose rebuild gave its rows again stays
    fresh). And the checks' evaluations: the plan's answers. Raises StrataError (E021 when a run
    holds the warehouse past `timeout`)."""
    if not partitioned:
        return EngineStale()
    found = stale_partitions(strata.project_path, strata.warehouse_path, strata.branch, timeout=timeout)
    stale: dict[dg.AssetKey, list[str | None]] = {}
    for key, item in partitioned.items():
        answer = found.get(item.model)
        if answer is None or not asset_graph.has(key):
            continue  # never built by partitions: Dagster's status (missing) applies
        known = set(item.partitions_def.get_partition_keys(dynamic_partitions_store=instance))
        stale[key] = [
            partition
            for partition in answer.keys
            if partition in known and (answer.is_all or is_stale(key, partition))
        ]
    answers = plan_answers(strata, partitioned, instance, timeout=timeout)
    return EngineStale(stale, stale_evaluations(partitioned, answers))


def dagster_is_stale(instance: dg.DagsterInstance, asset_graph) -> Callable[[dg.AssetKey, str], bool]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """Dagster's own status of one partition of a partitioned strata model: is it stale? Read from
    the provenance strata's own materialization of it records, as Dagster's staleness reads it
    (assets.provenance), through Dagster's public event records."""
    return lambda key, partition: is_stale_by_provenance(instance, asset_graph, key, partition)


def shown_results(
    instance: dg.DagsterInstance, check_keys: Sequence[dg.AssetCheckKey]
) -> dict[dg.AssetCheckKey, str | None]:
    """The digest of the result Dagster shows for each check (None: never evaluated), leaving out
    the checks a run not finished yet plans to evaluate: its result is the one to show."""
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(list(check_keys))
    shown: dict[dg.AssetCheckKey, str | None] = {}
    for check_key in check_keys:
        record = latest.get(check_key)
        evaluation = None if record is None else record.evaluation
        if record is not None and not isinstance(evaluation, dg.AssetCheckEvaluation):
            run = instance.get_run_by_id(record.run_id) if record.run_id else None
            if run is not None and not run.is_finished:
                continue  # planned in a run going on: its check step evaluates it
            evaluation = None  # planned in a run that ended without evaluating it
        shown[check_key] = None if evaluation is None else digest(evaluation.passed, evaluation.description)
    return shown


def unshown(
    instance: dg.DagsterInstance, evaluations: Mapping[dg.AssetKey, dg.AssetCheckEvaluation]
) -> list[dg.AssetCheckEvaluation]:
    """The `evaluations` whose result differs from the one Dagster shows (see `shown_results`)."""
    shown = shown_results(instance, [dg.AssetCheckKey(key, STALE_PARTITIONS_CHECK) for key in evaluations])
    return [
        evaluation
        for key, evaluation in sorted(evaluations.items(), key=lambda item: str(item[0]))
        if (check_key := dg.AssetCheckKey(key, STALE_PARTITIONS_CHECK)) in shown
        and shown[check_key] != digest(evaluation.passed, evaluation.description)
    ]


@dataclass(frozen=True)
class StaleCheckReporter:
    """Re-evaluates the `strata_stale_partitions` checks at the end of a strata step and logs the
    results that differ from the ones Dagster shows, so what users see follows every observation
    and build, with or without the sensor."""

    models: Mapping[dg.AssetKey, PartitionedModel] = field(default_factory=dict)

    def changed(self, instance: dg.DagsterInstance, strata: StrataResource) -> list[dg.AssetCheckEvaluation]:
        """The evaluations to log: those that differ from the ones Dagster shows, but not of the
        checks a run going on evaluates itself (this one's, when it materializes their model).
        Raises StrataError (E021 when a run holds the warehouse)."""
        shown = shown_results(
            instance, [dg.AssetCheckKey(key, STALE_PARTITIONS_CHECK) for key in self.models]
        )
        models = {check_key.asset_key: self.models[check_key.asset_key] for check_key in shown}
        answers = plan_answers(strata, models, instance, timeout=None)
        return unshown(instance, stale_evaluations(models, answers))

    def log_changed(
        self, context: dg.OpExecutionContext | dg.AssetExecutionContext, strata: StrataResource
    ) -> None:
        """`changed`, logged in `context`'s step. A failure to read is a warning: the step's own
        work is done, and the next step or tick evaluates again."""
        if not self.models:
            return
        try:
            events = self.changed(context.instance, strata)
        except StrataError as error:
            context.log.warning(f"`{STALE_PARTITIONS_CHECK}` not re-evaluated: {error.render()}")
            return
        for event in events:
            context.log_event(event)  # type: ignore[arg-type]  # Dagster logs a check evaluation too; its annotation leaves it out


def partition_evaluations(
    context: dg.AssetCheckExecutionContext,
    check_key: dg.AssetCheckKey,
    item: PartitionedModel,
    answers: Mapping[dg.AssetKey, StaleAnswer],
) -> list[dg.AssetCheckEvaluation]:
    """The check's evaluation of each partition this run planned it for: stale or not, by the
    plan's answer (not known yet while an upstream model waits to be rebuilt)."""
    answer = answers.get(check_key.asset_key)
    if answer is None:
        return []
    stale = set(answer.keys)
    events = []
    for partition in planned_partitions(context, check_key):
        fresh = not answer.waits_for and not answer.is_missing and partition not in stale
        events.append(
            dg.AssetCheckEvaluation(
                asset_key=check_key.asset_key,
                check_name=STALE_PARTITIONS_CHECK,
                passed=fresh,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"`{item.model}` partition {partition}: {'up to date' if fresh else answer.reason}",
                partition=partition,
            )
        )
    return events


def stale_partitions_family(models: Mapping[dg.AssetKey, PartitionedModel]) -> CheckFamily:
    """The checks of `models`: one read-only plan answers them all."""
    specs = tuple(
        dg.AssetCheckSpec(
            STALE_PARTITIONS_CHECK,
            asset=key,
            description=(
                f"`{item.model}` is up to date: `strata plan --only-stale` would rebuild no partition of "
                "it. Fails (WARN) with the stale partitions' count and ranges, or the upstream model "
                "rebuilt first, while it would."
            ),
            blocking=False,
            metadata={c.MODEL_KEY: item.model},
        )
        for key, item in models.items()
    )

    def evaluate(
        context: dg.AssetCheckExecutionContext, strata: StrataResource, keys: Sequence[dg.AssetCheckKey]
    ) -> Iterator[dg.AssetCheckResult]:
        selected = {key.asset_key: models[key.asset_key] for key in keys}
        answers = plan_answers(strata, selected, context.instance, timeout=None)
        evaluations = stale_evaluations(selected, answers)
        for check_key in keys:
            # A run over partitions plans this check once per partition (Dagster plans every check
            # of a ranged run so, partitioned or not): each gets its partition's own answer, first,
            # so that none is left "skipped" and the model's result below is the latest one shown.
            for event in partition_evaluations(context, check_key, selected[check_key.asset_key], answers):
                context.op_execution_context.log_event(event)  # type: ignore[arg-type]  # Dagster logs a check evaluation too; its annotation leaves it out
            evaluation = evaluations[check_key.asset_key]
            yield dg.AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=STALE_PARTITIONS_CHECK,
                passed=evaluation.passed,
                severity=evaluation.severity,
                description=evaluation.description,
                metadata=evaluation.metadata,
            )

    return CheckFamily(specs, evaluate)
