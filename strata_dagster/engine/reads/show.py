"""`strata show`: a model's live rows, on any engine, without the engine's own client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_dagster.backends.base import WarehouseError
from strata_dagster.backends.opening import open_live_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, model_view
from strata_dagster.engine.context import check_branch, check_branch_of
from strata_dagster.errors import E_SHOW_OUTPUT, E_UNKNOWN_MODEL, E_VERIFY_LIVE, StrataError
from strata_dagster.language import load_project
from strata_dagster.language.selection import select

FORMATS = {".parquet": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class ShownRows:
    model: str
    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[Any, ...]]
    is_truncated: bool  # more rows exist than were read


def _model_name(project_dir: Path, model: str, branch: str) -> str:
    project = load_project(project_dir)
    check_branch_of(project, branch)
    names = select(project, (model,))  # E025, with a did-you-mean, for a name that is no model
    if len(names) != 1 or names[0] != model:
        raise StrataError(
            E_UNKNOWN_MODEL,
            f"`strata show` shows one model by name, not `{model}`",
            hint="name one model, e.g. `strata show PROJECT daily_revenue`",
        )
    return model


def _not_published(model: str, branch: str, error: WarehouseError) -> StrataError:
    return StrataError(
        E_VERIFY_LIVE,
        f"`{model}` has no live view on branch `{branch}` to show ({error})",
        subject=model,
        hint=f"run `strata run PROJECT --branch {branch}` first",
    )


def show_rows(
    project_dir: Path, warehouse: Path, model: str, *, branch: str = DEFAULT_BRANCH, limit: int = 20
) -> ShownRows:
    """The first `limit` live rows of `model` on `branch`, read the way readers read them."""
    name = _model_name(project_dir, model, branch)
    with open_live_session(warehouse) as session:
        try:
            columns, rows = session.read_rows(model_view(name, branch), limit + 1)
        except WarehouseError as error:
            raise _not_published(name, branch, error) from None
    return ShownRows(name, columns, rows[:limit], len(rows) > limit)


def export_rows(
    project_dir: Path, warehouse: Path, model: str, output: Path, *, branch: str = DEFAULT_BRANCH
) -> int:
    """Every live row of `model` into `output` (.parquet or .csv); the number of rows written."""
    check_branch(branch)  # before the output's checks: the command line's first mistake
    file_format = FORMATS.get(output.suffix.lower())
    if file_format is None:
        raise StrataError(
            E_SHOW_OUTPUT,
            f"`{output}` is neither a .parquet nor a .csv file",
            hint="name the output file.parquet or file.csv",
        )
    if not output.parent.exists():
        raise StrataError(
            E_SHOW_OUTPUT, f"the folder of `{output}` does not exist", hint="create it, or write elsewhere"
        )
    name = _model_name(project_dir, model, branch)
    with open_live_session(warehouse) as session:
        try:
            session.describe(model_view(name, branch))
        except WarehouseError as error:
            raise _not_published(name, branch, error) from None
        try:
            return session.export_rows(model_view(name, branch), output, file_format)
        except (WarehouseError, OSError) as error:
            raise StrataError(
                E_SHOW_OUTPUT, f"cannot write `{output}`: {error}", hint="check the path and free space"
            ) from None
