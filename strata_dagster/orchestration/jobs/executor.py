"""The executor of strata definitions: Dagster's in-process executor, refusing a run that is a strata
backfill without a reason (or with bad correction tags) before any step starts.

It refuses here, not when the run is submitted: a run coordinator that refuses a backfill's runs
makes the backfill daemon retry them forever, while a run refused in its executor ends, and its
backfill ends once its runs have (its *Runs* tab shows each one Canceled, with the reason). In-process:
DuckDB allows one writer per file.

Only strata's own assets and jobs are its business: a run is checked against the project whose
assets it materializes (or whose job it is), with that project's backfill jobs and sources; a run
of other assets goes through as Dagster's in-process executor would run it. Every project shares
this one executor definition, so that the definitions of several projects (several components)
merge into one code location. A step also checks before it writes anything (`execute_in_process`
and `materialize()` run Dagster's own executor).

A `strata_backfill_range` run whose range its assets do not have (E068) is refused the same way.

A refused run ends CANCELED, not FAILURE, with the E085 (E068) message (no stack trace) on its events:
Dagster marks an asset partition failed when the latest run planned to materialize it FAILED,
and a refused run wrote nothing, so its partitions keep the status they had (missing or
materialized). A Dagster backfill counts its canceled runs' partitions as failed, and ends
*Failed* once its runs are done: no public API cancels it (docs/dagster.md, Backfills).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import dagster as dg

from strata_dagster.errors import StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.jobs.backfills import engine_request, read_backfill
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource

EXECUTOR_NAME = "strata_in_process"
REFUSED_WROTE = "nothing was written: the run was refused before any step"


@dataclass(frozen=True)
class GuardedProject:
    """A project whose backfills the executor checks: where it is, and its names."""

    strata: StrataResource
    names: ProjectNames
    # Raises StrataError (E068) for a `strata_backfill_range` config its assets do not have.
    check_range: Callable[[Mapping[str, Any], dg.DagsterInstance], None] | None = None


# What the definitions built in this process guard: by asset key, and by job name (a job launched
# without an asset selection). A code location builds its definitions before any run executes.
_by_asset: dict[dg.AssetKey, GuardedProject] = {}
_by_job: dict[str, GuardedProject] = {}


def guard(project: GuardedProject, asset_keys: Iterable[dg.AssetKey], job_names: Iterable[str]) -> None:
    """Check the backfills of runs that materialize `asset_keys` or run the jobs `job_names`."""
    _by_asset.update(dict.fromkeys(asset_keys, project))
    _by_job.update(dict.fromkeys(job_names, project))


def _projects_of(run: dg.DagsterRun) -> list[GuardedProject]:
    """The strata projects whose assets `run` materializes."""
    found: dict[int, GuardedProject] = {}
    if run.asset_selection:
        found.update((id(project), project) for key in run.asset_selection if (project := _by_asset.get(key)))
    elif run.job_name in _by_job:
        project = _by_job[run.job_name]
        found[id(project)] = project
    return list(found.values())


class StrataBackfillGuard(dg.Executor):
    """Checks the run's backfill tags for each strata project it concerns (E085), then hands the
    plan to `inner`."""

    def __init__(self, inner: dg.Executor) -> None:
        self.inner = inner

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        run = plan_context.dagster_run
        for project in _projects_of(run):
            if read_backfill(run.job_name, run.tags, project.names) is None:
                continue
            try:
                request = engine_request(project.strata, project.names, run.job_name, run.tags)
            except StrataError as error:
                _refuse(plan_context, error)
            if run.job_name == project.names.backfill_range_job and project.check_range is not None:
                try:
                    project.check_range(
                        _op_config(run, project.names.backfill_range_op), plan_context.instance
                    )
                except StrataError as error:
                    _refuse(plan_context, error)
            corrects = f", correcting run {request.backfill_of}" if request.backfill_of else ""
            overrides = f", sources {dict(request.overrides)}" if request.overrides else ""
            refresh = ", full refresh" if request.full_refresh else ""
            plan_context.log.info(
                f"strata backfill ({c.REASON_TAG}: {request.reason}){corrects}{overrides}{refresh}"
            )
        yield from self.inner.execute(plan_context, execution_plan)

    @property
    def retries(self) -> Any:
        return self.inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.inner.step_dependency_config


def _op_config(run: dg.DagsterRun, op: str) -> Mapping[str, Any]:
    ops = (run.run_config or {}).get("ops") or {}
    if not isinstance(ops, Mapping):  # Dagster validated the run config: its ops' configs by op name
        raise AttributeError(f"'{type(ops).__name__}' object has no attribute 'get'")
    return (ops.get(op) or {}).get("config") or {}


def _refuse(plan_context: Any, error: StrataError) -> NoReturn:
    """End the run CANCELED before any step: the E085 message as an error line of the run's log
    (with what was written: nothing), the same message on the cancellation (what the runs list
    and the backfill's runs show), and no stack trace. Raising the interruption stops the plan;
    Dagster sees the run already canceled and only notes that it cleaned up. The run's backfill
    is left to Dagster: no public API cancels it (docs/dagster.md, Backfills)."""
    plan_context.log.error(f"{error.render()}\n{REFUSED_WROTE}")
    plan_context.instance.report_run_canceled(plan_context.dagster_run, message=error.render())
    raise dg.DagsterExecutionInterruptedError(error.render())


@dg.executor(name=EXECUTOR_NAME, config_schema=dg.in_process_executor.config_schema)  # type: ignore[call-overload]  # executor() takes a definition's schema too; its annotation names only the user-facing forms
def strata_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Dagster's in-process executor (same config), checking strata backfills before any step."""
    create = dg.in_process_executor.executor_creation_fn
    assert create is not None
    return StrataBackfillGuard(create(init_context))
