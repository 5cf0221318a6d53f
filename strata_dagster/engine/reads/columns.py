"""The columns of every source and model as an orchestrator declares them, read without building.

A model's column names come from the compiler. Its types: the `contract:` type where the contract
lists the column (the schema every published build is held to), else the type DuckDB binds the
model's query to now, over the sources as they are (a DESCRIBE: nothing is read or built, so it
holds before the first run and follows the current code, not the last build), else none (a
source that cannot be read yet). `not null` comes from the contract, `unique` from the `unique:`
pin. A source's columns are what DuckDB reads from its table or files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.lineage import ColumnDeps, column_lineage
from strata_dagster.compile.relations import model_view
from strata_dagster.engine.context import ProjectContext


@dataclass(frozen=True)
class ColumnInfo:
    """One output column of a source or model, as known at definition time."""

    name: str
    type: str | None  # None: not known without building (a source that cannot be read yet)
    is_not_null: bool = False  # declared `not null` by the contract


@dataclass(frozen=True)
class RelationColumns:
    """The columns of a source or model, and which of them its `unique:` pin keys on."""

    columns: tuple[ColumnInfo, ...]
    unique: tuple[str, ...] = ()


def read_columns(
    session: Session, context: ProjectContext, query_of: Callable[[str], exp.Query]
) -> dict[str, RelationColumns]:
    """Source or model name -> its columns (sources and models whose columns are unknown are left
    out). `query_of(model)` is the model's query over sources only, as it would build now."""
    project = context.project
    found: dict[str, RelationColumns] = {}
    for name in project.sources:
        table = source_table(project.sources[name], project, context.overrides)
        described = _describe(session, table)
        if described is not None:
            found[name] = RelationColumns(tuple(ColumnInfo(column, kind) for column, kind in described))
    for name in project.order:
        compiled = context.compiled.models[name]
        if compiled.columns is None:
            continue
        properties = project.models[name].properties
        contract = {column.name: column for column in properties.contract or ()}
        bound = dict(_describe(session, query_of(name)) or ())
        columns = []
        for column in compiled.columns:
            pinned = contract.get(column)
            kind = pinned.type if pinned is not None else bound.get(column)
            columns.append(ColumnInfo(column, kind, pinned is not None and pinned.is_not_null))
        found[name] = RelationColumns(tuple(columns), properties.unique or ())
    return found


def read_lineage(
    context: ProjectContext, columns: dict[str, RelationColumns]
) -> dict[str, dict[str, ColumnDeps]]:
    """Model name -> output column -> the (source or model, column) pairs it derives from."""
    names = {name: tuple(column.name for column in found.columns) for name, found in columns.items()}
    return {
        name: column_lineage(context.compiled.models[name], names)
        for name in context.project.order
        if name in context.compiled.models
    }


def live_columns(warehouse: Path | str, model: str, branch: str) -> tuple[tuple[str, str], ...] | None:
    """(column, type) of model `model`'s live view on `branch` as published; None when unreadable."""
    with open_session(Path(warehouse)) as session:
        return _describe(session, model_view(model, branch))


def _describe(session: Session, relation: exp.Table | exp.Query) -> tuple[tuple[str, str], ...] | None:
    try:
        return session.describe(relation)
    except WarehouseError:
        return None  # not readable (yet): names only, the definitions still load
