"""One engine run for the unpartitioned SQL models of a Dagster run, shared by their steps.

Why: every SQL model's step ran the engine for its model alone, and each engine run pays a fixed
cost (opening the warehouse, compiling the project, deciding the model's upstream): 0.15-0.3 s,
about 2 s of the example's unpartitioned models where one engine run of them all takes well under
one (docs/dagster.md, "The Dagster path's cost"). Now the first such step of a run builds, in one
engine run, its model and every other one it can safely build now; their steps report their
model's outcome from it, in their own order, with their own events.

A model joins the shared run only when nothing Dagster would do between the two steps could change
what the engine builds or whether Dagster builds it: it is an unpartitioned SQL model whose step is
in the run's plan and has not run, and every asset upstream of it in the plan is upstream of the
step that runs the engine (so already materialized), or was materialized or observed by a step of
this run that succeeded (the sources' observations a wave starts with), or is in the shared run
itself; the last two with no blocking check (whose failure would make Dagster skip what is below
it). A Python model, a partitioned model, another asset or a blocking check upstream in the plan
keeps a model to its own step.

What stays as it was: a step whose model's view no longer shows what the shared run built (another
run published it in between) runs the engine for its model again. When a shared run fails, the
step runs the engine for its own model alone, and so do the run's later steps: each failure is
reported by the model that causes it, and nothing was published.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg

from strata_dagster.engine.backfill import run_backfill_request
from strata_dagster.engine.partition_status import PublishedState, published_state
from strata_dagster.engine.run import RunRequest, RunResult
from strata_dagster.errors import StrataError
from strata_dagster.language.definition import Project
from strata_dagster.orchestration.backfills import engine_request
from strata_dagster.orchestration.plan_wording import model_of
from strata_dagster.orchestration.resources import StrataResource

KEPT_RUNS = 8  # runs whose shared results are kept (an in-process executor runs one at a time)


@dataclass(frozen=True)
class ModelBuild:
    """The engine run that built a step's model, and the model's published state."""

    request: RunRequest
    result: RunResult
    models: tuple[str, ...]  # what the engine run was asked for: the step's model and those sharing it
    state: PublishedState
    ran_here: bool  # whether this step ran the engine (and reports what it rebuilt upstream)


@dataclass
class _RunBuilds:
    pending: dict[str, tuple[RunRequest, RunResult, tuple[str, ...]]] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)  # models whose step ran in this run
    is_shared: bool = True  # False once a shared run failed


_runs: OrderedDict[str, _RunBuilds] = OrderedDict()
_lock = threading.Lock()


def build_unpartitioned(
    context: dg.OutputContext, strata: StrataResource, project: Project, model: str
) -> ModelBuild:
    """Build `model` (unpartitioned) for its step, in the run's shared engine run when it can."""
    dagster_run = context.step_context.dagster_run
    builds = _builds_of(dagster_run.run_id)
    pending = builds.pending.pop(model, None)
    builds.reported.add(model)
    if pending is not None:
        request, result, models = pending
        state = _state(strata, result, model, live=True)
        if state.is_live:
            return ModelBuild(request, result, models, state, ran_here=False)
        return build_alone(context, strata, model)
    models = _shared_models(context, project, model, builds) if builds.is_shared else (model,)
    if len(models) == 1:
        return build_alone(context, strata, model)
    request = engine_request(strata, dagster_run.job_name, dagster_run.tags, models)
    try:
        result = run_backfill_request(request)
    except StrataError:
        builds.is_shared = False
        return build_alone(context, strata, model)
    for other in models[1:]:
        builds.pending[other] = (request, result, models)
    return ModelBuild(request, result, models, _state(strata, result, model, live=False), ran_here=True)


def build_alone(
    context: dg.OutputContext, strata: StrataResource, model: str, partitions: Sequence[str] = ()
) -> ModelBuild:
    """Build `model` (its `partitions`: `--partitions` items) in an engine run of its own."""
    dagster_run = context.step_context.dagster_run
    # Checked again here: execute_in_process and materialize() swap in their own executor.
    request = engine_request(strata, dagster_run.job_name, dagster_run.tags, (model,), partitions)
    result = run_backfill_request(request)
    return ModelBuild(request, result, (model,), _state(strata, result, model, live=False), ran_here=True)


def _state(strata: StrataResource, result: RunResult, model: str, live: bool) -> PublishedState:
    outcome = result.outcome(model)
    live_as = (model, strata.branch) if live else None
    return published_state(strata.warehouse_path, outcome.snapshot_id, result.entry, live_as)


def _builds_of(run_id: str) -> _RunBuilds:
    with _lock:
        builds = _runs.get(run_id)
        if builds is None:
            builds = _runs[run_id] = _RunBuilds()
            while len(_runs) > KEPT_RUNS:
                _runs.popitem(last=False)
        return builds


def _shared_models(
    context: dg.OutputContext, project: Project, model: str, builds: _RunBuilds
) -> tuple[str, ...]:
    """`model` first, then the models of the plan that can be built with it now (module docstring)."""
    step = context.step_context
    to_execute = set(step.execution_plan.step_keys_to_execute)
    layer = step.job_def.asset_layer
    graph = layer.asset_graph
    in_plan: set[dg.AssetKey] = set()
    blocking: set[dg.AssetKey] = set()
    sql_models: dict[str, dg.AssetKey] = {}  # the plan's unpartitioned SQL models, one asset per step
    for data in layer.data:
        if str(data.node_handle) not in to_execute:
            continue
        assets = data.assets_def
        in_plan |= assets.keys
        blocking |= {spec.asset_key for spec in assets.check_specs if spec.blocking}
        if len(assets.keys) != 1 or assets.partitions_def is not None:
            continue
        (key,) = assets.keys
        name = model_of(graph, key)
        definition = project.models.get(name) if name is not None else None
        if definition is not None and definition.properties.partitioned_by is None:
            sql_models[name] = key
    here = context.asset_key
    succeeded = _succeeded_assets(step, layer) - blocking
    materialized = graph.get_ancestor_asset_keys(here) | succeeded
    # Built and waiting for their steps: this one, and those an earlier shared run built.
    built = {here} | {key for name, key in sql_models.items() if name in builds.pending}
    shared = [model]
    for name in project.order:
        key = sql_models.get(name)
        if key is None or name in builds.reported or name in builds.pending:
            continue
        upstream = graph.get_ancestor_asset_keys(key) & in_plan
        if all(item in materialized or (item in built and item not in blocking) for item in upstream):
            shared.append(name)
            built.add(key)
    return tuple(shared)


def _succeeded_assets(step: dg.StepExecutionContext, layer) -> set[dg.AssetKey]:
    """The assets of this run's steps that have succeeded (one asset per step): the in-process
    executor runs one step at a time, so what has not succeeded yet is not upstream data."""
    records = step.instance.get_records_for_run(step.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS).records
    done = {record.event_log_entry.step_key for record in records}
    return {
        key
        for data in layer.data
        if str(data.node_handle) in done and len(data.assets_def.keys) == 1
        for key in data.assets_def.keys
    }
