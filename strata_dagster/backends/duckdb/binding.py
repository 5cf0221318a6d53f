"""DuckDB binds every model's SQL for `strata check`, before any run: against empty tables with the
sources' known schemas, each model's full build created empty in turn for the models that read it.

The compiler checks names and columns; what only DuckDB's binder knows (a misspelled function,
`amount + status`, an aggregate outside a grouping, a window function in a filter) used to show
first at `strata run`, as E032. Nothing is read but the sources' schemas (already read by the
check), and nothing is written: the tables are temporary, on a read-only connection to the
warehouse (so that what the warehouse defines, a macro or a table a subquery names, binds as in a
run), or in memory when there is no warehouse yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
from sqlglot import exp
from sqlglot.errors import SqlglotError

from strata_dagster.backends.duckdb.connection import connect
from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.backends.duckdb.sql import evaluate_in_utc
from strata_dagster.backends.sql.runner import run
from strata_dagster.compile.compiler import compile_model
from strata_dagster.compile.project import CompiledProject
from strata_dagster.errors import E_BUILD, Location, StrataError, first_line
from strata_dagster.language.definition import Model, ModelProperties, Project
from strata_dagster.sql.render import data_type

_SOURCE_PREFIX = "source__"
_MODEL_PREFIX = "model__"


@dataclass(frozen=True)
class Binding:
    """How many models DuckDB bound, and the errors of those it refused. A model is not bound when
    it reads a source whose schema is not known (its table not loaded yet) or a model that was
    not bound or was refused."""

    bound: int
    errors: tuple[StrataError, ...]


def bind_models(
    compiled: CompiledProject, source_schemas: Mapping[str, tuple[tuple[str, str], ...]], warehouse: Path
) -> Binding:
    if warehouse.exists():
        with connect(warehouse, read_only=True) as con:
            return _bind(con, compiled, source_schemas)
    con = evaluate_in_utc(connect_in_memory())
    try:
        return _bind(con, compiled, source_schemas)
    finally:
        con.close()


def _bind(
    con: duckdb.DuckDBPyConnection,
    compiled: CompiledProject,
    source_schemas: Mapping[str, tuple[tuple[str, str], ...]],
) -> Binding:
    project = compiled.project
    known = {name for name, columns in source_schemas.items() if _created(con, _source(name), columns)}
    columns: dict[str, tuple[str, ...] | None] = {
        name: tuple(column for column, _ in source_schemas[name]) for name in known
    }
    bound = 0
    errors: list[StrataError] = []
    for name in project.order:
        model = compiled.models.get(name)
        if model is None or any(relation not in known for relation in project.models[name].references):
            continue
        statement = model.bound(_bound_relation(project))
        try:
            run(
                con,
                exp.Create(
                    kind="TABLE",
                    this=_model(name),
                    expression=statement.limit(0),
                    properties=_temporary_table(),
                ),
            )
        except duckdb.Error as error:
            if _reads_outside_the_project(error):
                continue
            errors.append(
                StrataError(
                    E_BUILD,
                    f"DuckDB rejects model `{name}`: {first_line(error)}",
                    _refused_step(con, project, project.models[name], columns),
                    hint=f"run `strata compile PROJECT --model {name}` to see the SQL; "
                    "`strata run` would refuse it the same way",
                )
            )
            continue
        known.add(name)
        columns[name] = model.columns
        bound += 1
    return Binding(bound, tuple(errors))


def _refused_step(
    con: duckdb.DuckDBPyConnection,
    project: Project,
    model: Model,
    columns: Mapping[str, tuple[str, ...] | None],
) -> Location:
    """Where the model's pipeline first fails to bind: the first of its steps whose prefix DuckDB
    refuses (compiled without the model's properties), else the model itself (its properties or
    the windows' tie-breakers)."""
    for count in range(1, len(model.steps) + 1):
        prefix = replace(model, steps=model.steps[:count], properties=ModelProperties())
        try:
            statement = compile_model(prefix, columns.get).bound(_bound_relation(project))
        except StrataError:
            return model.location
        try:
            run(con, statement.limit(0))
        except duckdb.Error:
            return model.steps[count - 1].location
    return model.location


def _bound_relation(project: Project) -> Callable[[str], exp.Table]:
    return lambda relation: _source(relation) if relation in project.sources else _model(relation)


def _created(con: duckdb.DuckDBPyConnection, name: exp.Table, columns: tuple[tuple[str, str], ...]) -> bool:
    """An empty table of these columns; False when a type cannot be written back (the source's
    models are then not bound, rather than refused for it)."""
    if not columns:
        return False
    try:
        definitions = [
            exp.ColumnDef(this=exp.to_identifier(column), kind=data_type(kind)) for column, kind in columns
        ]
        run(
            con,
            exp.Create(
                kind="TABLE",
                this=exp.Schema(this=name, expressions=definitions),
                properties=_temporary_table(),
            ),
        )
    except (duckdb.Error, SqlglotError):
        return False
    return True


def _reads_outside_the_project(error: duckdb.Error) -> bool:
    """A table that is neither a source nor a model (a subquery's bare name): the warehouse may
    hold it, which only a run can tell, so the model is left unbound rather than refused."""
    return isinstance(error, duckdb.CatalogException) and "Table with name" in str(error)


def _temporary_table() -> exp.Properties:
    return exp.Properties(expressions=[exp.TemporaryProperty()])


def _source(name: str) -> exp.Table:
    return _temporary(_SOURCE_PREFIX + name)


def _model(name: str) -> exp.Table:
    return _temporary(_MODEL_PREFIX + name)


def _temporary(name: str) -> exp.Table:
    """A temporary table's name, qualified: a table of the warehouse may have the same one."""
    return exp.Table(
        this=exp.to_identifier(name), db=exp.to_identifier("main"), catalog=exp.to_identifier("temp")
    )
