"""`strata show`: look at a model's live rows from the terminal, or write them to a file."""

from __future__ import annotations

from pathlib import Path

import click

from strata_dagster.cli.options import project_argument, resolve_warehouse, warehouse_option
from strata_dagster.cli.output import console, reports_errors, say
from strata_dagster.names import DEFAULT_BRANCH
from strata_dagster.wording import counted


@click.command("show")
@project_argument
@click.argument("model")
@warehouse_option
@click.option(
    "--branch", default=DEFAULT_BRANCH, show_default=True, help="The branch whose live view to read."
)
@click.option(
    "--limit",
    type=click.IntRange(min=0, max=2**62),
    default=20,
    show_default=True,
    help="Rows to print (not with --output).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write every row to this .parquet or .csv file instead of printing.",
)
@reports_errors
def show_command(
    project: Path, model: str, warehouse: Path | None, branch: str, limit: int, output: Path | None
) -> None:
    """Print MODEL's live rows as readers see them (a table of the first --limit rows), or write them all
    to --output, on either backend."""
    from rich.table import Table

    from strata_dagster.engine.reads.show import export_rows, show_rows

    where = resolve_warehouse(project, warehouse)
    if output is not None:
        written = export_rows(project, where, model, output, branch=branch)
        say(f"wrote {counted(written, 'row')} of `{model}` to {output}")
        return
    shown = show_rows(project, where, model, branch=branch, limit=limit)
    table = Table(*(f"{name}\n{kind.lower()}" for name, kind in shown.columns))
    for row in shown.rows:
        table.add_row(*("NULL" if value is None else str(value) for value in row))
    console.print(table)
    more = (
        f"first {counted(len(shown.rows), 'row')}; more with --limit or --output"
        if shown.is_truncated
        else counted(len(shown.rows), "row")
    )
    say(f"{model}: {more}")
