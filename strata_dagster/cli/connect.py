"""`strata connect`: read the live views from any DuckDB client, while runs write."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from strata_dagster.cli.options import project_argument, resolve_warehouse, warehouse_option
from strata_dagster.cli.output import console, error_console, print_warnings, reports_errors

PROMPT = "strata> "


@click.command("connect")
@project_argument
@warehouse_option
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the SQL statement a fresh in-memory DuckDB connection runs to read the live views, and exit.",
)
@reports_errors
def connect_command(project: Path, warehouse: Path | None, print_only: bool) -> None:
    """Read PROJECT's live views (`main.v_<model>`, branch schemas) as last published.

    Readers open a read-only serving copy, never the warehouse file: they never wait for a run,
    and a run never waits for them. A connection sees the state published when it attached; a
    new connection (or running the statement again) sees the latest. Without --print, opens the
    `duckdb` shell there when it is installed, else a small SQL prompt (end statements with `;`).
    """
    from strata_dagster.engine.damaged_files import unserved_warning
    from strata_dagster.engine.reads.readers import reader_statement_for, unserved_views

    statement = reader_statement_for(resolve_warehouse(project, warehouse))
    left_out = unserved_views(resolve_warehouse(project, warehouse))
    if left_out:
        print_warnings([unserved_warning(left_out)])
    if print_only:
        click.echo(statement)
        return
    duckdb_cli = shutil.which("duckdb")
    if duckdb_cli is not None:
        os.execv(duckdb_cli, [duckdb_cli, "-cmd", statement])
    _prompt(resolve_warehouse(project, warehouse))


def _prompt(warehouse: Path) -> None:
    from rich.table import Table

    from strata_dagster.backends.duckdb.reader_shell import ReaderShell

    shell = ReaderShell(warehouse)
    interactive = sys.stdin.isatty()
    pending = ""
    try:
        while True:
            if interactive:
                console.print(PROMPT if not pending else "   ...> ", end="")
            line = sys.stdin.readline()
            if not line:
                break
            if not pending and line.strip() in (".quit", ".exit"):
                break
            pending += line
            if not pending.rstrip().endswith(";"):
                continue
            result = shell.execute(pending)
            pending = ""
            if result.error is not None:
                error_console.print(f"error: {result.error}", markup=False, style="red")
                continue
            if result.columns:
                table = Table(*result.columns)
                for row in result.rows:
                    table.add_row(*("NULL" if value is None else str(value) for value in row))
                console.print(table)
    finally:
        shell.close()
