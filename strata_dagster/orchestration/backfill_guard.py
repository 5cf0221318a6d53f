"""The executor of strata definitions: Dagster's in-process executor, refusing a backfill run
without a reason (or with bad correction tags) before any step starts.

It refuses here, not when the run is submitted: a run coordinator that refuses a backfill's runs
makes the backfill daemon retry them forever, while a run refused in its executor ends the
backfill COMPLETED_FAILED. In-process only: DuckDB allows one writer per file.

A refused run ends CANCELED, not FAILURE, with the E085 message (no stack trace) on its events:
Dagster marks an asset partition failed when the latest run planned to materialize it FAILED,
and a refused run wrote nothing, so its partitions keep the status they had (missing or
materialized). A Dagster backfill counts its canceled runs' partitions as not done.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.events import DagsterEvent, EngineEventData

from strata_dagster.errors import StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.backfills import engine_request, read_backfill
from strata_dagster.orchestration.held_steps import held_between_steps
from strata_dagster.orchestration.resources import StrataResource

EXECUTOR_NAME = "strata_in_process"


class StrataBackfillGuard(dg.Executor):
    """Checks the run's backfill tags (E085), then hands the plan to `inner`, whose consecutive
    steps in `holding` (strata's own: models, observations, checks) share one open warehouse
    (orchestration.held_steps)."""

    def __init__(
        self, inner: dg.Executor, strata: StrataResource, holding: AbstractSet[str] = frozenset()
    ) -> None:
        self.inner = inner
        self.strata = strata
        self.holding = holding

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        run = plan_context.dagster_run
        if read_backfill(run.job_name, run.tags) is not None:
            try:
                request = engine_request(self.strata, run.job_name, run.tags)
            except StrataError as error:
                refusal = error
            else:
                refusal = None
            if refusal is not None:
                yield from _refuse(plan_context, refusal)
                return
            corrects = f", correcting run {request.backfill_of}" if request.backfill_of else ""
            overrides = f", sources {dict(request.overrides)}" if request.overrides else ""
            refresh = ", full refresh" if request.full_refresh else ""
            plan_context.log.info(
                f"strata backfill ({c.REASON_TAG}: {request.reason}){corrects}{overrides}{refresh}"
            )
        yield from held_between_steps(
            self.strata.warehouse_path, self.holding, self.inner.execute(plan_context, execution_plan)
        )

    @property
    def retries(self) -> Any:
        return self.inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.inner.step_dependency_config


def _refuse(plan_context: Any, error: StrataError) -> Iterator[dg.DagsterEvent]:
    """End the run CANCELED before any step: the E085 message as an event with metadata (what
    the run log shows), the same message on the cancellation (what the runs list shows), and no
    stack trace. Raising the interruption stops the plan; Dagster sees the run already canceled
    and only notes that it cleaned up."""
    yield DagsterEvent.engine_event(
        plan_context,
        error.render(),
        EngineEventData(metadata=_refusal_metadata(error)),
    )
    plan_context.instance.report_run_canceled(plan_context.dagster_run, message=error.render())
    raise DagsterExecutionInterruptedError(error.render())


def _refusal_metadata(error: StrataError) -> dict[str, str]:
    return {
        c.ERROR_CODE_KEY: error.code,
        c.ERROR_KEY: error.message,
        **({c.HINT_KEY: error.hint} if error.hint else {}),
        c.WRITTEN_KEY: "nothing: the run was refused before any step",
    }


def strata_executor(strata: StrataResource, holding: AbstractSet[str] = frozenset()) -> dg.ExecutorDefinition:
    """The in-process executor (same config), guarded for the project and warehouse of `strata`;
    `holding`: the step keys of strata's own steps."""

    @dg.executor(name=EXECUTOR_NAME, config_schema=dg.in_process_executor.config_schema)
    def _executor(init_context: dg.InitExecutorContext) -> dg.Executor:
        create = dg.in_process_executor.executor_creation_fn
        assert create is not None
        return StrataBackfillGuard(create(init_context), strata, holding)

    return _executor
