"""The `strata` command line."""

from __future__ import annotations

from pathlib import Path

import click

from strata_dagster.cli.options import project_argument, resolve_warehouse, warehouse_option
from strata_dagster.cli.output import console, print_warnings, reports_errors
from strata_dagster.cli.runs import COMMANDS
from strata_dagster.cli.verify import verify_command
from strata_dagster.compile import CompiledProject, compile_project
from strata_dagster.errors import E_UNKNOWN_MODEL, StrataError
from strata_dagster.language import load_project
from strata_dagster.warehouse.sample_data import MAX_ROWS as MAX_SAMPLE_ROWS
from strata_dagster.warehouse.sample_data import write_sample_data


@click.group()
@click.version_option(package_name="strata_dagster")
def main() -> None:
    """strata: incremental, versioned models on DuckDB, as Dagster assets."""


def load_and_compile(project: Path, warehouse: Path) -> CompiledProject:
    from strata_dagster.warehouse.session import read_source_schemas

    loaded = load_project(project)
    schemas = read_source_schemas(warehouse, loaded)
    compiled = compile_project(loaded, schemas)
    print_warnings(compiled.warnings)
    return compiled


@main.command()
@project_argument
@warehouse_option
@reports_errors
def check(project: Path, warehouse: Path | None) -> None:
    """Parse and validate every module of PROJECT (column checks use the warehouse's source schemas)."""
    compiled = load_and_compile(project, resolve_warehouse(project, warehouse))
    loaded = compiled.project
    console.print(
        f"ok: {len(loaded.modules)} modules, {len(loaded.sources)} sources, {len(loaded.models)} models"
    )


@main.command("compile")
@project_argument
@warehouse_option
@click.option("--model", "models", multiple=True, help="Only this model (repeatable).")
@reports_errors
def compile_command(project: Path, warehouse: Path | None, models: tuple[str, ...]) -> None:
    """Print the DuckDB SQL of each model of PROJECT, in dependency order."""
    compiled = load_and_compile(project, resolve_warehouse(project, warehouse))
    names = list(models) or list(compiled.project.order)
    for name in names:
        if name not in compiled.models:
            raise StrataError(
                E_UNKNOWN_MODEL,
                f"no model named `{name}`",
                hint="models: " + ", ".join(compiled.project.order),
            )
    for name in names:
        if len(names) > 1:
            console.print(f"-- model {name}", markup=False)
        console.print(compiled.sql(name) + ";", markup=False, soft_wrap=True)
        if len(names) > 1:
            console.print()


@main.command("sample-data")
@project_argument
@warehouse_option
@click.option(
    "--rows",
    type=click.IntRange(min=1, max=MAX_SAMPLE_ROWS),
    default=100_000,
    show_default=True,
    help="Orders to write.",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Same seed and rows: identical data.")
@reports_errors
def sample_data(project: Path, warehouse: Path | None, rows: int, seed: int) -> None:
    """Write deterministic sample orders and customers into the warehouse (tables raw.*)."""
    target = resolve_warehouse(project, warehouse)
    summary = write_sample_data(target, rows, seed=seed)
    console.print(f"wrote sample data to {target}: {summary}", markup=False)


for _command in COMMANDS:
    main.add_command(_command)
main.add_command(verify_command)


if __name__ == "__main__":
    main()
