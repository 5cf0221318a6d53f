"""The retention job: `strata gc` as the `strata_gc` job and its schedule (stopped unless turned on).

It drops the snapshots no branch exposes and no kept run needs, exactly as `strata gc --keep N
--older-than AGE [--compact]` does (engine.commands.gc), in the `duckdb` pool so it never races a build.
"""

from dataclasses import dataclass
from typing import Final

import dagster as dg

from strata_dagster.engine.commands.gc import gc, parse_age
from strata_dagster.errors import E_GC, E_GC_SCHEDULE, StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.failures import as_failure
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource

DEFAULT_GC_CRON: Final = "0 4 * * 0"  # Sundays, 4 AM UTC: after the nightly verification


@dataclass(frozen=True)
class StrataGcPolicy:
    """Which runs' snapshots the retention job keeps, and when it runs.

    `keep`: the last N runs (and backfills); `older_than`: runs younger than that age (`12h`,
    `30d`, `2w`); with both, a run either keeps is kept, as in `strata gc`. `compact` rewrites the
    warehouse file afterwards (holds the lock while it copies). `cron` is UTC.
    """

    keep: int | None = None
    older_than: str | None = None
    compact: bool = False
    cron: str = DEFAULT_GC_CRON

    def __post_init__(self) -> None:
        if self.keep is None and self.older_than is None:
            raise StrataError(
                E_GC,
                "the gc schedule needs to know which runs to keep",
                hint="give keep (the last N runs), older_than (e.g. 30d), or both",
            )
        if self.keep is not None and self.keep < 0:
            raise StrataError(
                E_GC, f"gc keep {self.keep} is negative", hint="give a number of runs, 0 or more"
            )
        if self.older_than is not None:
            parse_age(self.older_than)
        if not _is_cron(self.cron):
            raise StrataError(
                E_GC_SCHEDULE,
                f"gc cron `{self.cron}` is not a cron expression",
                hint="give five fields, minute hour day month weekday, e.g. `0 4 * * 0` (Sundays at 4 AM UTC)",
            )


def _is_cron(text: str) -> bool:
    """Whether Dagster takes `text` as a schedule's cron (its own check, through a schedule)."""
    try:
        dg.ScheduleDefinition(name="strata_gc_cron_check", cron_schedule=text, job_name="strata_gc")
    except dg.DagsterInvalidDefinitionError:
        return False
    return True


def build_gc_job(
    policy: StrataGcPolicy, status: dg.DefaultScheduleStatus, names: ProjectNames
) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    """The `strata_gc` job (one op, in the `duckdb` pool) and `strata_gc_schedule` on `policy.cron`."""
    resource_key = names.resource_key

    @dg.op(
        name=names.gc_op, pool=c.DUCKDB_POOL, out=dg.Out(dg.Nothing), required_resource_keys={resource_key}
    )
    def _collect(context: dg.OpExecutionContext) -> dg.Output[None]:
        strata: StrataResource = getattr(context.resources, resource_key)
        try:
            result = gc(
                strata.warehouse_path,
                policy.keep,
                older_than=parse_age(policy.older_than) if policy.older_than is not None else None,
                compact_file=policy.compact,
            )
        except StrataError as error:
            # A user's configuration or a busy warehouse: the message, never a stack trace.
            raise as_failure(error) from None
        context.log.info(
            f"dropped {len(result.dropped)} snapshot(s); kept the snapshots of {result.kept} run(s)"
        )
        return dg.Output(
            None,
            metadata={
                "strata/dropped_snapshots": len(result.dropped),
                "strata/dropped": dg.MetadataValue.json(list(result.dropped)),
                "strata/kept_runs": result.kept,
                "strata/reclaimed_bytes": result.reclaimed_bytes,
                "strata/compacted": result.is_compacted,
                "strata/file_bytes_after": result.file_bytes_after,
            },
        )

    description = (
        f"strata gc: drops the snapshots no branch exposes and no kept run needs (keep={policy.keep}, "
        f"older_than={policy.older_than}, compact={policy.compact})."
    )

    @dg.job(name=names.gc_job, description=description, tags={"strata/kind": "gc"})
    def _job() -> None:
        _collect()

    schedule = dg.ScheduleDefinition(
        name=names.gc_schedule,
        job=_job,
        cron_schedule=policy.cron,
        execution_timezone="UTC",
        default_status=status,
        description=f"Runs {names.gc_job} at `{policy.cron}` (UTC); stopped until turned on under Automation.",
    )
    return _job, schedule
