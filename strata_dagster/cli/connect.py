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
@click.option(
    "--iceberg",
    "iceberg",
    is_flag=True,
    help="Print, per model, the Iceberg snapshot of one published state and the scan that reads it, and exit.",
)
@click.option(
    "--run", "run_id", default=None, help="With --iceberg: the state right after this run (default: now)."
)
@click.option(
    "--branch", default="main", show_default=True, help="With --iceberg: the branch (its namespace)."
)
@reports_errors
def connect_command(
    project: Path,
    warehouse: Path | None,
    print_only: bool,
    iceberg: bool = False,
    run_id: str | None = None,
    branch: str = "main",
) -> None:
    """Read PROJECT's live views (`main.v_<model>`, branch schemas) as last published.

    Readers open a read-only serving copy, never the warehouse file: they never wait for a run,
    and a run never waits for them. A connection sees the state published when it attached; a
    new connection (or running the statement again) sees the latest. Without --print, opens the
    `duckdb` shell there when it is installed, else a small SQL prompt (end statements with `;`).
    """
    if iceberg:
        _print_iceberg(resolve_warehouse(project, warehouse), branch, run_id)
        return
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


def _print_iceberg(warehouse: Path, branch: str, run_id: str | None) -> None:
    """One consistent state of every model: the same run's snapshot of each table."""
    from strata_dagster.backends.opening import open_session
    from strata_dagster.engine.commands.operations import find_entry
    from strata_dagster.engine.iceberg_publication import catalog_statement, published_states
    from strata_dagster.errors import E_ICEBERG, StrataError

    with open_session(warehouse, read_only=True, must_exist=True) as session:
        entry = find_entry(session.history, run_id).entry if run_id is not None else None
        states = published_states(session, warehouse, branch, entry)
    if not states:
        raise StrataError(
            E_ICEBERG,
            "no Iceberg tables to print: STRATA_ICEBERG_CATALOG names no catalog, or the branch has no live model",
            hint="set STRATA_ICEBERG_CATALOG=sqlite (or the catalog's URI) as the runs had it",
        )
    click.echo(f"# from pyiceberg.catalog import load_catalog; {catalog_statement(warehouse)}")
    for state in states:
        if state.snapshot_id is None:
            click.echo(f"{state.table}\tnot in the catalog (not published yet, or expired by gc)")
        else:
            click.echo(
                f"{state.table}\t{state.snapshot_id}\t"
                f"catalog.load_table({state.table!r}).scan(snapshot_id={state.snapshot_id})"
            )


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
