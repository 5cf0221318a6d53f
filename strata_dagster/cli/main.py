"""The `strata` command line. Each command imports what it runs when it runs: `strata --help` and
`strata CMD --help` import click and the command modules alone (no engine, no DuckDB, no rich)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import click

from strata_dagster.cli.connect import connect_command
from strata_dagster.cli.doctor import doctor_command
from strata_dagster.cli.gc import gc_command
from strata_dagster.cli.group import StrataGroup
from strata_dagster.cli.options import (
    apply_resource_limits,
    model_selection,
    project_argument,
    resolve_warehouse,
    warehouse_option,
)
from strata_dagster.cli.output import before_each_command, console, print_warnings, reports_errors, say
from strata_dagster.cli.plan import plan_command
from strata_dagster.cli.runs import COMMANDS
from strata_dagster.cli.show import show_command
from strata_dagster.cli.unit_tests import test_command
from strata_dagster.cli.verify import verify_command
from strata_dagster.errors import StrataError, StrataErrorGroup
from strata_dagster.names import MAX_SAMPLE_ROWS
from strata_dagster.wording import counted

if TYPE_CHECKING:
    from sqlglot import exp

    from strata_dagster.compile import CompiledProject
    from strata_dagster.language import Project


@click.group(cls=StrataGroup)
@click.version_option(package_name="strata_dagster")
@click.option(
    "--memory-limit",
    default=None,
    metavar="SIZE",
    help="Most memory DuckDB may hold for data, beyond which it spills (the process needs about 120 MB "
    "more), e.g. 4GB or 50% (default: $STRATA_MEMORY_LIMIT, else 50% of RAM).",
)
@click.option(
    "--max-temp-size",
    default=None,
    metavar="SIZE",
    help="Most disk DuckDB may spill to, e.g. 8GB (default: $STRATA_MAX_TEMP_SIZE, else 16GiB or half the free disk).",
)
@click.option(
    "--temp-directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder DuckDB spills to (default: $STRATA_TEMP_DIRECTORY, else WAREHOUSE.tmp beside the warehouse).",
)
@reports_errors
def main(memory_limit: str | None, max_temp_size: str | None, temp_directory: Path | None) -> None:
    """strata: incremental, versioned models on DuckDB, as Dagster assets."""
    # Once the command's own arguments are read (so `strata CMD --help` is only click's), before it
    # reads or writes anything.
    before_each_command(lambda: _prepare(memory_limit, max_temp_size, temp_directory))


def _prepare(memory_limit: str | None, max_temp_size: str | None, temp_directory: Path | None) -> None:
    from strata_dagster.backends.duckdb.settings import check_environment

    apply_resource_limits(memory_limit, max_temp_size, temp_directory)
    check_environment()  # every STRATA_* variable


def load_and_compile(
    project: Path, warehouse: Path, engine: str = "duckdb", *, strict: bool = False, bind: bool = False
) -> tuple[CompiledProject, dict[str, exp.Expr | None], int]:
    """The compiled project, each model's statement as `engine` runs it (E070 for what the engine
    would compute differently) and, with `bind` on DuckDB, how many models DuckDB bound against
    the sources' schemas (E032 for those it refuses, all of them)."""
    from strata_dagster.backends.dialect_check import check_engine
    from strata_dagster.backends.duckdb.binding import bind_models
    from strata_dagster.backends.opening import read_source_schemas
    from strata_dagster.compile import compile_project
    from strata_dagster.language import load_project

    loaded = load_project(project)
    schemas = read_source_schemas(warehouse, loaded)
    compiled = compile_project(loaded, schemas)
    statements = check_engine(compiled, engine, schemas, strict=strict)
    print_warnings(compiled.warnings)
    bound = 0
    if bind and engine == "duckdb":
        binding = bind_models(compiled, schemas, warehouse)
        if binding.errors:
            raise StrataErrorGroup(binding.errors)
        bound = binding.bound
    return compiled, statements, bound


_UNKNOWN_COLUMNS = "a table whose columns only a run knows: not loaded yet"


def _bound_text(engine: str, bound: int, models: int) -> str:
    """How many models DuckDB bound, for the end of check's ok line ("" on other backends)."""
    if engine != "duckdb" or not models:
        return ""
    if bound == models:
        return "; DuckDB binds it" if bound == 1 else f"; DuckDB binds all {bound}"
    if bound == 0:
        return f"; DuckDB binds none of them (they read {_UNKNOWN_COLUMNS})"
    return f"; DuckDB binds {bound} of {models} (the other {models - bound} read {_UNKNOWN_COLUMNS})"


@main.command()
@project_argument
@warehouse_option
@reports_errors
def check(project: Path, warehouse: Path | None) -> None:
    """Parse and validate every module of PROJECT (column checks use the warehouse's source schemas,
    and DuckDB binds every model's SQL against them; with --backend spark, every construct is also
    checked against Spark)."""
    from strata_dagster.backends.choice import current_backend

    engine = current_backend().name
    compiled, _, bound = load_and_compile(project, resolve_warehouse(project, warehouse), engine, bind=True)
    loaded = compiled.project
    say(
        f"ok: {counted(len(loaded.modules), 'module')}, {counted(len(loaded.sources), 'source')}, "
        f"{counted(len(loaded.models), 'model')}{_bound_text(engine, bound, len(loaded.models))}"
    )


@main.command("compile")
@project_argument
@warehouse_option
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="SELECTORS",
    help="Only these models (repeatable): a name, glob, tag:name, +model or model+, as in --models.",
)
@reports_errors
def compile_command(project: Path, warehouse: Path | None, models: tuple[str, ...]) -> None:
    """Print the SQL of each model of PROJECT (DuckDB's, or Spark's with --backend spark), in dependency order."""
    from strata_dagster.backends.choice import current_backend
    from strata_dagster.language.selection import select

    selection = tuple(selector for item in models for selector in model_selection(item, "--model"))
    engine = current_backend().name
    compiled, statements, _ = load_and_compile(
        project, resolve_warehouse(project, warehouse), engine, strict=engine != "duckdb"
    )
    names = select(compiled.project, selection)
    for name in names:
        if len(names) > 1:
            console.print(f"-- model {name}", markup=False)
        console.print(_statement_sql(compiled, statements, name, engine) + ";", markup=False, soft_wrap=True)
        if len(names) > 1:
            console.print()


def _statement_sql(
    compiled: CompiledProject, statements: dict[str, exp.Expr | None], name: str, engine: str
) -> str:
    if engine == "duckdb":
        return compiled.sql(name)
    from strata_dagster.backends.dialect_check import spark_relation
    from strata_dagster.compile.relations import bind

    statement = statements[name]
    assert statement is not None  # strict: a model without its Spark statement raised E070
    bound = bind(statement, lambda relation: spark_relation(compiled.project, relation))
    return bound.sql(dialect=engine, pretty=True)


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
@click.option(
    "--days",
    type=click.IntRange(min=1, max=3650),
    default=30,
    show_default=True,
    help="Daily drops to write for business-versioned Parquet sources; folders already there are kept, "
    "so a larger number adds the next days' drops.",
)
@reports_errors
def sample_data(project: Path, warehouse: Path | None, rows: int, seed: int, days: int) -> None:
    """Write deterministic sample orders and customers into the warehouse (tables raw.*), and daily
    hive-partitioned Parquet drops (`dt=YYYY-MM-DD/part-0.parquet` + `_SUCCESS`) for the project's
    business-versioned file sources."""
    from strata_dagster.backends.duckdb.sample_data import write_sample_data
    from strata_dagster.backends.duckdb.sample_events import drop_folder, write_sample_events
    from strata_dagster.language import load_project

    try:
        loaded: Project | None = load_project(project)
    except StrataError:
        loaded = None  # not a project (yet): only the shop's tables are written
    drops = [
        source
        for source in (loaded.sources.values() if loaded is not None else ())
        if source.is_business_versioned and source.path is not None and source.partitioned_by is not None
    ]
    for source in drops:
        assert source.partitioned_by is not None and source.path is not None
        assert loaded is not None
        folder = drop_folder(source.path, loaded.root)
        written = write_sample_events(
            folder,
            source.partitioned_by.column,
            days=days,
            rows_per_day=max(rows // days, 1),
            start=source.start if isinstance(source.start, dt.date) else dt.date(2026, 1, 1),
            seed=seed,
        )
        console.print(f"wrote {written} daily drop(s) of source {source.name} under {folder}", markup=False)
    if drops and loaded is not None and all(source.path is not None for source in loaded.sources.values()):
        return
    target = resolve_warehouse(project, warehouse)
    summary = write_sample_data(target, rows, seed=seed)
    say(f"wrote sample data to {target}: {summary}")


for _command in COMMANDS:
    main.add_command(_command)
main.add_command(verify_command)
main.add_command(test_command)
main.add_command(gc_command)
main.add_command(plan_command)
main.add_command(connect_command)
main.add_command(doctor_command)
main.add_command(show_command)


if __name__ == "__main__":
    from strata_dagster.cli.process import as_process

    as_process(main)
