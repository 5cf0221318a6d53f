"""Options every command shares (what they check is imported when they check it: `--help` imports none of it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from strata_dagster.cli.output import error_console
from strata_dagster.errors import E_PROJECT, E_UNKNOWN_MODEL, E_VERIFY_PARTITIONS, StrataError
from strata_dagster.names import BACKEND_ENV, BACKEND_NAMES, SPARK_REMOTE_ENV, WAREHOUSE_ENV
from strata_dagster.paths import path_problem, shortened

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_WAREHOUSE_NAME = "warehouse.duckdb"

project_argument = click.argument("project", type=click.Path(path_type=Path))


def _choose_backend(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """`--backend` (or its former name `--engine`) and `--spark-remote` choose this process's
    backend (backends.choice) before the command body runs; a bad value is the usual `error[E071]`,
    never a traceback."""
    from strata_dagster.backends.choice import backend_choice, choose_backend, chosen_backend

    ctx.meta[f"strata_{param.name}"] = value
    if "strata_backend_before" not in ctx.meta:
        # The choice lasts for this command: a command invoked in-process (tests) leaves none behind.
        ctx.meta["strata_backend_before"] = chosen_backend()
        ctx.call_on_close(lambda: choose_backend(ctx.meta["strata_backend_before"]))
    name = ctx.meta.get("strata_backend") or ctx.meta.get("strata_engine")
    try:  # every option calls this, in whichever order click reads them; the last call sees all
        choose_backend(backend_choice(name, ctx.meta.get("strata_spark_remote")))
    except StrataError as error:
        error_console.print(error.render(), markup=False, style="red", soft_wrap=True)
        ctx.exit(1)


def warehouse_option(command: F) -> F:
    """`--warehouse`, with the backend it is on: `--backend` and `--spark-remote`."""
    command = click.option(
        "--spark-remote",
        default=None,
        metavar="sc://HOST:PORT",
        expose_value=False,
        callback=_choose_backend,
        help=f"With --backend spark: a Spark Connect server instead of a local Spark (default: ${SPARK_REMOTE_ENV}).",
    )(command)
    command = click.option(
        "--engine",
        type=click.Choice(BACKEND_NAMES),
        default=None,
        expose_value=False,
        callback=_choose_backend,
        hidden=True,  # the former name of --backend, still read
    )(command)
    command = click.option(
        "--backend",
        type=click.Choice(BACKEND_NAMES),
        default=None,
        expose_value=False,
        callback=_choose_backend,
        help=f"The backend to build on (default: ${BACKEND_ENV}, else duckdb). On spark, --warehouse is "
        "the Spark warehouse directory, with its catalog.",
    )(command)
    return click.option(
        "--warehouse",
        type=click.Path(path_type=Path),
        default=None,
        help=f"DuckDB warehouse file, or Spark warehouse directory (default: ${WAREHOUSE_ENV}, else "
        f"{DEFAULT_WAREHOUSE_NAME} in the project folder; spark-warehouse/ on Spark).",
    )(command)


def resolve_warehouse(project: Path, warehouse: Path | None) -> Path:
    """The warehouse a command on `project` uses: --warehouse, else $STRATA_WAREHOUSE, else the
    engine's default in the project folder. E013 for a project path and E020 for a warehouse path
    the OS cannot use (too long, a folder for a DuckDB file, `/`)."""
    project_problem = path_problem(project)
    if project_problem is not None:
        raise StrataError(
            E_PROJECT,
            f"project folder `{shortened(project)}` cannot be used: {project_problem}",
            hint="pass the folder that holds *.strata files",
        )
    from strata_dagster.backends.choice import current_backend
    from strata_dagster.backends.duckdb.connection import check_warehouse_path

    engine = current_backend()
    from_env = os.environ.get(WAREHOUSE_ENV)
    if warehouse is None and from_env:
        return check_warehouse_path(
            Path(from_env), is_file=engine.capabilities.has_warehouse_file, setting=WAREHOUSE_ENV
        )
    if warehouse is None:
        folder = project.parent if project.is_file() else project
        warehouse = folder / engine.default_warehouse_name
    return check_warehouse_path(warehouse, is_file=engine.capabilities.has_warehouse_file)


def models_option(action: str) -> Callable[[F], F]:
    """`--models SELECTORS` for a command that does `action` to models; pass its value through
    `model_selection` to the engine, which resolves it."""
    return click.option(
        "--models",
        default=None,
        metavar="SELECTORS",
        help=f"Models to {action} (default: all): names, globs (stg_*), tag:name, +model (and its "
        "upstream), model+ (and its downstream), separated by commas (a union).",
    )


def apply_resource_limits(
    memory_limit: str | None, max_temp_size: str | None, temp_directory: Path | None
) -> None:
    """Export the limits the command line gave: every warehouse connection of this process reads them.
    They last for this command: a command invoked in-process (tests) leaves the environment as it was."""
    from strata_dagster.backends.duckdb.limits import (
        MAX_TEMP_SIZE_ENV,
        MEMORY_LIMIT_ENV,
        TEMP_DIRECTORY_ENV,
        check_size,
    )

    before = {
        name: os.environ.get(name) for name in (MEMORY_LIMIT_ENV, MAX_TEMP_SIZE_ENV, TEMP_DIRECTORY_ENV)
    }
    click.get_current_context().call_on_close(lambda: _restore_environment(before))

    if memory_limit is not None:
        os.environ[MEMORY_LIMIT_ENV] = check_size("--memory-limit", memory_limit, allow_percent=True)
    if max_temp_size is not None:
        os.environ[MAX_TEMP_SIZE_ENV] = check_size("--max-temp-size", max_temp_size)
    if temp_directory is not None:
        os.environ[TEMP_DIRECTORY_ENV] = str(temp_directory)


def _restore_environment(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def partitions_option(help_text: str) -> Callable[[F], F]:
    """`--partitions DAYS_OR_MONTHS`; pass its value through `split_partitions` to the engine."""
    return click.option("--partitions", default=None, metavar="PARTITIONS", help=help_text)


def model_selection(text: str | None, option: str = "--models") -> tuple[str, ...]:
    """The selectors of `--models` (none when it was not given: every model). E025 when it was
    given but names nothing (`--models ''`, `--models ','`): that is no way to select all."""
    if text is None:
        return ()
    from strata_dagster.language.selection import split_selection

    selection = split_selection(text)
    if not selection:
        raise StrataError(
            E_UNKNOWN_MODEL,
            f"`{option} {text!r}` names no model",
            hint=f"give model selectors (e.g. {option} daily_revenue,+orders_enriched), "
            f"or leave {option} out to select every model",
        )
    return selection


def split_partitions(text: str | None) -> tuple[str, ...]:
    """`2026-01-01..2026-01-31, 2026-02` -> its items (none when `--partitions` was not given);
    the engine parses and checks them (E040). E040 when it was given but names nothing."""
    if text is None:
        return ()
    items = tuple(part.strip() for part in text.split(",") if part.strip())
    if not items:
        raise StrataError(
            E_VERIFY_PARTITIONS,
            f"`--partitions {text!r}` names no partition",
            hint="give days, months or ranges (e.g. --partitions 2026-01-01..2026-01-31,2026-02), "
            "or leave --partitions out",
        )
    return items
