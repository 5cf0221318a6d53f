"""Run sqlglot statements against DuckDB; identifiers always go through sqlglot quoting."""

from __future__ import annotations

from typing import Any

import duckdb
from sqlglot import exp

from strata_dagster.warehouse.migrations import SNAPSHOT_SCHEMA

DIALECT = "duckdb"
ENGINE_VERSION = f"duckdb-{duckdb.__version__}"


def render(statement: exp.Expression) -> str:
    return statement.sql(dialect=DIALECT)


def run(con: duckdb.DuckDBPyConnection, statement: exp.Expression, params: list[Any] | None = None) -> Any:
    return con.execute(render(statement), params or [])


def table(name: str, schema: str | None = None) -> exp.Table:
    """A table reference with quoted-as-needed identifiers (hostile names stay names)."""
    node = exp.Table(this=exp.to_identifier(name))
    if schema is not None:
        node.set("db", exp.to_identifier(schema))
    return node


def snapshot_table(name: str) -> exp.Table:
    return table(name, SNAPSHOT_SCHEMA)


def parse_table_name(text: str) -> exp.Table:
    """`schema.table` or `table` as written by a user (e.g. `--source orders=fixes.orders`)."""
    parts = text.split(".")
    node = exp.Table(this=exp.to_identifier(parts[-1]))
    if len(parts) >= 2:
        node.set("db", exp.to_identifier(parts[-2]))
    if len(parts) >= 3:
        node.set("catalog", exp.to_identifier(parts[-3]))
    return node


def describe(con: duckdb.DuckDBPyConnection, relation: exp.Table | exp.Query) -> tuple[tuple[str, str], ...]:
    """(column, type) of any relation DuckDB can read."""
    source = relation.subquery("__described") if isinstance(relation, exp.Query) else relation.copy()
    query = exp.Describe(this=exp.select("*").from_(source))
    return tuple((str(row[0]), str(row[1])) for row in run(con, query).fetchall())


def relation_exists(con: duckdb.DuckDBPyConnection, relation: exp.Table) -> bool:
    try:
        describe(con, relation)
    except duckdb.CatalogException:
        return False
    return True
