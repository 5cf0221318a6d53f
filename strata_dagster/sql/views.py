"""Snapshot and live-view names, and what a view's stored SQL reads (parsed, nothing run)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from strata_dagster.compile.relations import view_name
from strata_dagster.sql.render import DIALECT, SNAPSHOT_SCHEMA, table


def snapshot_table_name(snapshot_id: str, model: str) -> str:
    return f"snap_{snapshot_id}_{model}"


def view_table(branch_schema: str, model: str) -> exp.Table:
    return table(view_name(model), branch_schema)


def tables_of_view(sql: str, dialect: str = DIALECT) -> tuple[str, ...]:
    """The snapshot tables a view's stored SQL (in `dialect`) reads; () when it reads anything else."""
    try:
        parsed = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return ()
    query = parsed.expression if isinstance(parsed, exp.Create) else parsed
    if query is None:
        return ()
    tables = [node for node in query.find_all(exp.Table) if node.db == SNAPSHOT_SCHEMA]
    other = [node for node in query.find_all(exp.Table) if node.db != SNAPSHOT_SCHEMA]
    if other:
        return ()  # the view was edited to read something else
    return tuple(sorted({node.name for node in tables}))


@dataclass(frozen=True)
class PinViolation:
    kind: str  # "unique" | "contract"
    message: str
