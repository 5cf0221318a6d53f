"""`strata plan`: what `strata run` with the same arguments would do, and why; writes nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from strata_dagster.cli.options import (
    model_selection,
    project_argument,
    resolve_warehouse,
    split_partitions,
    warehouse_option,
)
from strata_dagster.cli.output import console, print_warnings, reports_errors
from strata_dagster.cli.runs import (
    branch_option,
    build_models_option,
    rebuild_partitions_option,
    source_option,
)

if TYPE_CHECKING:
    from strata_dagster.engine.plan import Plan

WOULD_RUN_EXIT = 1  # as `terraform plan -detailed-exitcode` says "changes present"


@click.command("plan")
@project_argument
@warehouse_option
@build_models_option
@branch_option
@source_option
@click.option("--only-stale", is_flag=True, help="Plan a run that builds only what changed.")
@click.option(
    "--full-refresh", is_flag=True, help="Plan a run that rebuilds the selected models from all their input."
)
@rebuild_partitions_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@reports_errors
def plan_command(
    project: Path,
    warehouse: Path | None,
    models: str | None,
    branch: str,
    sources: tuple[str, ...],
    only_stale: bool,
    full_refresh: bool,
    partitions: str | None,
    as_json: bool,
) -> None:
    """Show what `strata run` with the same arguments would do to each model, and why, without
    writing anything (the warehouse is opened read-only).

    Exit status: 0 when the run would change nothing (every model reused, every live view already
    showing it), 1 when it would build or publish something, as `terraform plan -detailed-exitcode`
    (errors also exit 1, after error[E0xx]).
    """
    from strata_dagster.backends.duckdb.sources import parse_overrides
    from strata_dagster.engine.decisions.removed import removed_warning
    from strata_dagster.engine.plan import plan
    from strata_dagster.engine.run import RunRequest
    from strata_dagster.language import load_project

    loaded = load_project(project)
    request = RunRequest(
        project_dir=project,
        warehouse=resolve_warehouse(project, warehouse),
        models=model_selection(models),
        branch=branch,
        overrides=parse_overrides(list(sources), loaded),
        only_stale=only_stale,
        full_refresh=full_refresh,
        partitions=split_partitions(partitions),
    )
    result = plan(request)
    if as_json:
        import json

        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        print_plan(result)
    if result.removed:
        print_warnings([removed_warning(result.removed, result.branch)])
    if result.would_run:
        sys.exit(WOULD_RUN_EXIT)


def print_plan(result: Plan) -> None:
    from rich.table import Table

    table = Table("model", "path", "why", "rows to read", title=f"strata plan on branch {result.branch}")
    for model in result.models:
        rows = f"{model.rows_to_read:,}" if model.rows_to_read is not None else ""
        table.add_row(model.model, model.path, model.text(), rows)
    console.print(table)
    building = [model.model for model in result.models if model.would_build]
    again = [model.model for model in result.models if model.publishes_again]
    if again:
        console.print(
            f"{len(building)} of {len(result.models)} models would be built; {len(again)} reused "
            f"{'snapshot' if len(again) == 1 else 'snapshots'} published again (not what the branch "
            f"shows now): {', '.join(again)}",
            markup=False,
        )
    elif building:
        console.print(f"{len(building)} of {len(result.models)} models would be built", markup=False)
    else:
        console.print("everything up to date (nothing to do)")
