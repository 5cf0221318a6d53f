"""`strata test`: run the models' unit tests (the `test` blocks of the project's modules)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from strata_dagster.cli.options import (
    model_selection,
    models_option,
    project_argument,
    resolve_warehouse,
    warehouse_option,
)
from strata_dagster.cli.output import console, reports_errors, say
from strata_dagster.errors import E_WAREHOUSE, StrataError

if TYPE_CHECKING:
    from strata_dagster.engine.commands.unit_tests import DiffRow, UnitTestReport, UnitTestResult


@click.command("test")
@project_argument
@models_option("test")
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@reports_errors
def test_command(project: Path, models: str | None, warehouse: Path | None, as_json: bool) -> None:
    """Run the unit tests of PROJECT's models: each model over its fixture rows, in an in-memory
    DuckDB, against the expected rows. The warehouse is only read (for its sources' columns and
    types), never written. Exits 1 when a test fails."""
    from strata_dagster.engine.commands.unit_tests import run_unit_tests

    selection = model_selection(models)
    if warehouse is not None and not warehouse.exists():
        # Without a warehouse the tests run on declared columns alone; a typo must not go unnoticed.
        raise StrataError(
            E_WAREHOUSE,
            f"warehouse `{warehouse}` does not exist",
            hint="check --warehouse, or leave it out: the tests then run without a warehouse",
        )
    report = run_unit_tests(project, resolve_warehouse(project, warehouse), selection)
    if as_json:
        import json

        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        print_report(report)
    if not report.is_passed:
        raise SystemExit(1)


def print_report(report: UnitTestReport) -> None:
    from rich import box
    from rich.table import Table

    if not report.results:
        console.print("test: no unit tests (write `test MODEL NAME { ... }` blocks)", markup=False)
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    table.add_column("model", no_wrap=True)
    table.add_column("test", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("where", overflow="fold")
    for result in report.results:
        outcome = "[green]pass[/]" if result.is_passed else "[red]FAIL[/]"
        where = f"{result.location.file}:{result.location.line}"
        table.add_row(result.model, result.name, outcome, where)
    console.print(table)
    for result in report.failed:
        _print_failure(result)
    passed = len(report.results) - len(report.failed)
    summary = f"test: {passed} passed, {len(report.failed)} failed"
    say(summary, style="red" if report.failed else None)


def _print_failure(result: UnitTestResult) -> None:
    console.print()
    console.print(
        f"FAIL {result.model}.{result.name} at {result.location} ({result.kind})",
        markup=False,
        style="red",
        soft_wrap=True,
    )
    console.print(f"  columns: ({', '.join(result.columns)})", markup=False, soft_wrap=True)
    for row in result.missing:
        console.print(
            f"  - {_row(row)}  expected at {row.location}, not given",
            markup=False,
            style="red",
            soft_wrap=True,
        )
    for row in result.unexpected:
        console.print(
            f"  + {_row(row)}  given by the model, not expected", markup=False, style="green", soft_wrap=True
        )
    if result.actual_order:
        console.print("  the rows are right but out of `order_by` order; the model gives:", markup=False)
        for row in result.actual_order:
            console.print(f"    {_row(row)}", markup=False, soft_wrap=True)


def _row(row: DiffRow) -> str:
    return "(" + ", ".join(row.values) + ")"
