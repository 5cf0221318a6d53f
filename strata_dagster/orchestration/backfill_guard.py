"""The executor of strata definitions: Dagster's in-process executor, refusing a backfill run
without a reason (or with bad correction tags) before any step starts.

It refuses here, not when the run is submitted: a run coordinator that refuses a backfill's runs
makes the backfill daemon retry them forever, while a run that fails in its executor ends the
backfill COMPLETED_FAILED. In-process only: DuckDB allows one writer per file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.backfills import engine_request, read_backfill
from strata_dagster.orchestration.resources import StrataResource

EXECUTOR_NAME = "strata_in_process"


class StrataBackfillGuard(dg.Executor):
    """Checks the run's backfill tags (E085), then hands the plan to `inner`."""

    def __init__(self, inner: dg.Executor, strata: StrataResource) -> None:
        self.inner = inner
        self.strata = strata

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        run = plan_context.dagster_run
        if read_backfill(run.job_name, run.tags) is not None:
            request = engine_request(self.strata, run.job_name, run.tags)
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


def strata_executor(strata: StrataResource) -> dg.ExecutorDefinition:
    """The in-process executor (same config), guarded for the project and warehouse of `strata`."""

    @dg.executor(name=EXECUTOR_NAME, config_schema=dg.in_process_executor.config_schema)
    def _executor(init_context: dg.InitExecutorContext) -> dg.Executor:
        create = dg.in_process_executor.executor_creation_fn
        assert create is not None
        return StrataBackfillGuard(create(init_context), strata)

    return _executor
