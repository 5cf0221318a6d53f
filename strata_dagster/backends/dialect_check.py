"""Compile-time check of a project for a backend (`strata check/compile --backend spark`).

Every model's statement is rewritten for the engine as a run would (`to_spark`); a construct the
engine would compute differently and that cannot be rewritten is E070, named with the model's
file:line:col of the construct itself. A refusal that only the input's columns could lift (a
`* REPLACE` over a source whose table is not loaded yet) is reported by `strict` checks only: the
engine knows the columns at run time.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import PurePosixPath
from typing import Final, Literal, TypeAlias, cast, get_args

from sqlglot import exp

from strata_dagster.backends.spark.dialect.translate import EngineDialectError, statement_columns, to_spark
from strata_dagster.compile.compiler import compile_model
from strata_dagster.compile.determinism import make_windows_deterministic, step_expressions
from strata_dagster.compile.project import CompiledProject, SourceSchemas
from strata_dagster.compile.relations import ROLE_SCHEMA, file_format, model_view, source_relation
from strata_dagster.errors import E_BACKEND_DIALECT, Location, StrataError, raise_collected
from strata_dagster.language.definition import (
    Expr,
    Model,
    Project,
)
from strata_dagster.language.expressions import PREFIX_LENGTH, shift

# The dialects a statement is checked for (the engine names of backends.choice).
Engine = Literal["duckdb", "spark"]
ENGINES: Final[tuple[str, ...]] = get_args(Engine)
# The meta key that ties a node of a compiled statement to the step expression it came from.
_ORIGIN = "strata_expr"


def check_engine(
    compiled: CompiledProject,
    engine: str,
    source_schemas: SourceSchemas | None = None,
    *,
    strict: bool = False,
) -> dict[str, exp.Expr | None]:
    """Each model's statement as `engine` runs it (relations still named by role, for binding), in
    dependency order; None for a model whose rewrite needs columns that are not known (only when
    not `strict`). Raises the E070 refusals found, all of them."""
    if engine not in ENGINES:
        raise StrataError(
            E_BACKEND_DIALECT, f"no engine named `{engine}`", hint=f"use one of {', '.join(ENGINES)}"
        )
    if engine == "duckdb":
        return {name: model.statement for name, model in compiled.models.items()}
    schema: dict[str, dict[str, str]] = {
        _role(name): {column: kind for column, kind in _typed(columns)}
        for name, columns in (source_schemas or {}).items()
    }
    statements: dict[str, exp.Expr | None] = {}
    errors: list[StrataError] = []
    project = compiled.project
    for name in project.order:
        if name not in compiled.models:
            continue
        key = _check_key(engine, compiled.models[name].statement, schema)
        checked = _CHECKED.get(key)
        if checked is not None:
            _CHECKED.move_to_end(key)
            _CHECK_COUNTS["hits"] += 1
            rewritten, kept = checked
            statements[name] = rewritten.copy()
            columns = None if kept is None else dict(kept)
        else:
            _CHECK_COUNTS["misses"] += 1
            model, expressions = _tagged(project.models[name])
            statement = _statement(model, compiled, schema)
            try:
                rewritten = to_spark(statement, schema)
                statements[name] = rewritten.copy()
            except EngineDialectError as refusal:
                rewritten = None
                statements[name] = None
                if strict or not refusal.needs_schema:
                    errors.append(refusal.located(name, _location(refusal.node, expressions, model)))
            columns = statement_columns(statement, schema)
            if rewritten is not None:  # a refusal is checked again: its error names its location
                _remember(key, rewritten, columns)
        if columns is not None:
            schema[_role(name)] = columns
    raise_collected(errors)
    return statements


# What check_engine computed per model, keyed by all it depends on: the engine, the model's
# compiled statement (its DuckDB SQL: the model's text, its inputs' columns and the project's
# compile all end up there) and the typed columns of every relation known when it was checked.
# A run on Spark checks every model each time it opens the project; a project that did not
# change asks the same questions again. Refusals are never kept (their error needs the location).
_CheckKey: TypeAlias = tuple[str, str, tuple[tuple[str, tuple[tuple[str, str], ...]], ...]]
_CHECKED: OrderedDict[_CheckKey, tuple[exp.Expr, dict[str, str] | None]] = OrderedDict()
_CHECKED_LIMIT: Final = 512
_CHECK_COUNTS: dict[str, int] = {"hits": 0, "misses": 0}


def check_cache_counts() -> dict[str, int]:
    """How many model checks were answered from the cache (hits) and computed (misses)."""
    return dict(_CHECK_COUNTS)


def _check_key(engine: str, statement: exp.Expr, schema: dict[str, dict[str, str]]) -> _CheckKey:
    known = tuple(sorted((relation, tuple(columns.items())) for relation, columns in schema.items()))
    return engine, statement.sql(dialect="duckdb"), known


def _remember(key: _CheckKey, rewritten: exp.Expr, columns: dict[str, str] | None) -> None:
    _CHECKED[key] = (rewritten.copy(), None if columns is None else dict(columns))
    while len(_CHECKED) > _CHECKED_LIMIT:
        _CHECKED.popitem(last=False)


def _role(name: str) -> str:
    return f"{ROLE_SCHEMA}.{name}"


def _typed(columns: Sequence[tuple[str, str]] | Sequence[str]) -> Iterator[tuple[str, str]]:
    for column in columns:
        if isinstance(column, str):
            yield column, "UNKNOWN"
        else:
            yield column[0], column[1]


def _statement(model: Model, compiled: CompiledProject, schema: dict[str, dict[str, str]]) -> exp.Expr:
    """The model compiled again from its tagged copy, as compile_project compiles it."""

    def columns_of(relation: str) -> tuple[str, ...] | None:
        if relation in compiled.models:
            return compiled.models[relation].columns
        known = schema.get(_role(relation))
        return tuple(known) if known is not None else None

    result = compile_model(model, columns_of)
    statement, _ = make_windows_deterministic(model, result.statement, result.base_columns)
    return statement


def _tagged(model: Model) -> tuple[Model, list[Expr]]:
    """A copy of `model` whose every expression node carries the index of its step expression."""
    tagged = copy.deepcopy(model)
    expressions = list(step_expressions(tagged))
    for index, expression in enumerate(expressions):
        for node in expression.node.walk():
            node.meta[_ORIGIN] = index
    return tagged, expressions


def _location(node: exp.Expr | None, expressions: list[Expr], model: Model) -> Location:
    """Where the refused construct is written: its own position when sqlglot kept one, else the
    first position inside it, else the start of its expression, else the model."""
    if node is None:
        return model.location
    for candidate in (node, *node.walk()):
        index = candidate.meta.get(_ORIGIN)
        if not isinstance(index, int) or index >= len(expressions):
            continue
        expression = expressions[index]
        starts = [
            found.meta["start"]
            for found in (candidate, *candidate.walk())
            if found.meta.get(_ORIGIN) == index and isinstance(found.meta.get("start"), int)
        ]
        if not starts:
            return expression.location
        offset = min(max(min(starts) - PREFIX_LENGTH, 0), len(expression.text))
        return shift(expression.location, expression.text, offset)
    return model.location


def spark_relation(project: Project, name: str) -> exp.Table:
    """How `strata compile --backend spark` shows a relation: a table source as declared, a file
    source as Spark's `format.\\`path\\`` reader, a model as its live view."""
    source = project.sources.get(name)
    if source is None:
        return model_view(name)
    if source.path is None:
        return source_relation(source, str(project.root))
    path = source.path
    if not PurePosixPath(path).is_absolute():
        path = str(PurePosixPath(str(project.root)) / path)
    return exp.Table(
        this=exp.to_identifier(path, quoted=True), db=exp.to_identifier(file_format(source.path))
    )


def for_engine(
    compiled: CompiledProject, engine: str, source_schemas: SourceSchemas | None
) -> CompiledProject:
    """The compiled project with every model's statement as `engine` runs it (strict: a run knows
    its sources' columns). The engine binds and rewrites these statements like DuckDB's."""
    if engine == "duckdb":
        return compiled
    statements = check_engine(compiled, engine, source_schemas, strict=True)
    models = {
        # Spark's rewrite of a model's SELECT is a SELECT.
        name: dataclasses.replace(model, statement=cast(exp.Select, statements[name] or model.statement))
        for name, model in compiled.models.items()
    }
    return dataclasses.replace(compiled, models=models)
