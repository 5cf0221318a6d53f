"""Column lineage of a compiled model: for each output column, the columns of the sources and
models it reads that its value derives from (passed through, computed, aggregated, joined on,
appended by a set operation, or expanded)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.relations import ROLE_SCHEMA
from strata_dagster.language.expressions import DIALECT

ColumnDeps = tuple[tuple[str, str], ...]  # (relation, column) pairs, relation = source or model name


def column_lineage(
    compiled: CompiledModel, upstream_columns: Mapping[str, Sequence[str]]
) -> dict[str, ColumnDeps]:
    """Output column -> the upstream (relation, column) pairs it derives from, in a stable order.

    `upstream_columns` names the columns of every relation the model reads; without them a `*`
    cannot be expanded and the model gets no lineage (an empty dict). A column computed from
    literals alone (`'placed' as status`, `count(*)`) derives from nothing upstream: empty deps.
    """
    relations = _relations(compiled.statement)
    if compiled.columns is None or any(upstream_columns.get(name) is None for name in relations):
        return {}
    upstream = tuple((name, tuple(upstream_columns[name])) for name in relations)
    return dict(_traced(compiled.statement.sql(dialect=DIALECT), upstream, compiled.columns))


# Tracing costs tens of milliseconds a column; definitions of one project load many times a process.
@functools.lru_cache(maxsize=512)
def _traced(
    sql: str, upstream: tuple[tuple[str, tuple[str, ...]], ...], columns: tuple[str, ...]
) -> tuple[tuple[str, ColumnDeps], ...]:
    # sqlglot's optimizer, imported when lineage is traced: a run that builds nothing never needs it.
    from sqlglot.lineage import lineage
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import build_scope

    schema: dict[str, object] = {
        ROLE_SCHEMA: {name: {column: "UNKNOWN" for column in names} for name, names in upstream}
    }
    # Re-read from its text: qualification needs the tree the parser makes.
    statement = sqlglot.parse_one(sql, dialect=DIALECT)
    try:
        qualified = qualify(statement, schema=schema, dialect=DIALECT, validate_qualify_columns=False)
        scope = build_scope(qualified)
    except SqlglotError:
        return ()
    if scope is None:
        return ()
    found: list[tuple[str, ColumnDeps]] = []
    for column in columns:
        try:
            # Untrimmed: only the tables a column reaches are read here, and trimming copies each
            # select on the way (half the tracing time).
            node = lineage(
                column, qualified, schema=schema, dialect=DIALECT, scope=scope, copy=False, trim_selects=False
            )
        except (SqlglotError, KeyError, ValueError):
            continue  # a column sqlglot cannot trace gets no lineage rather than a wrong one
        deps: dict[tuple[str, str], None] = {}
        for step in node.walk():
            table = step.expression
            if step.downstream or not isinstance(table, exp.Table) or table.db != ROLE_SCHEMA:
                continue
            deps[(table.name, step.name.split(".")[-1].strip('"'))] = None
        found.append((column, tuple(sorted(deps))))
    return tuple(found)


def _relations(statement: exp.Expr) -> list[str]:
    return sorted({table.name for table in statement.find_all(exp.Table) if table.db == ROLE_SCHEMA})
