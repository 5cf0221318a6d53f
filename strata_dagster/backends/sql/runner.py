"""Running sqlglot statements on a backend's connection: DuckDB's own, or another backend's that
renders the trees in its own dialect (SqlRunner, backends/spark/connection.py)."""

from __future__ import annotations

from typing import Any, TypeAlias

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import SqlRunner, WarehouseError
from strata_dagster.backends.sql import row_hash
from strata_dagster.sql.render import render

# What the SQL shared by both backends runs on: a DuckDB connection, or another backend's
# connection that renders the trees in its own dialect (backends/spark/connection.py).
Connection: TypeAlias = duckdb.DuckDBPyConnection | SqlRunner


def is_duckdb(con: Connection) -> bool:
    """Whether `con` is DuckDB's own connection (else another backend's SqlRunner)."""
    return isinstance(con, duckdb.DuckDBPyConnection)


def run(
    con: Connection,
    statement: exp.Expr,
    params: list[Any] | None = None,
    *,
    consume: bool = False,
) -> Any:
    if isinstance(con, duckdb.DuckDBPyConnection):
        sql = render(statement, consume=consume)
        if row_hash.MARKER in sql and (widened := row_hash.encoded(con, statement)) is not None:
            sql = render(widened, consume=True)
        return con.execute(sql, params or [])
    return con.run_statement(statement, params, consume=consume)


def describe(con: Connection, relation: exp.Table | exp.Query) -> tuple[tuple[str, str], ...]:
    """(column, type) of any relation DuckDB can read."""
    source = relation.subquery("__described") if isinstance(relation, exp.Query) else relation.copy()
    query = exp.Describe(this=exp.select("*").from_(source))
    return tuple((str(row[0]), str(row[1])) for row in run(con, query).fetchall())


def relation_exists(con: Connection, relation: exp.Table) -> bool:
    try:
        describe(con, relation)
    except duckdb.CatalogException:
        return False
    except WarehouseError as error:
        if error.is_missing_relation:  # another backend's "no such table"
            return False
        raise
    return True
