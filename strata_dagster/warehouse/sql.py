"""Run sqlglot statements against DuckDB; identifiers always go through sqlglot quoting."""

from __future__ import annotations

import functools
from typing import Any, TypeAlias

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import SqlRunner, WarehouseError
from strata_dagster.warehouse.migrations import SNAPSHOT_SCHEMA

DIALECT = "duckdb"

# What the SQL shared by both backends runs on: a DuckDB connection, or another backend's
# connection that renders the trees in its own dialect (spark/connection.py).
Connection: TypeAlias = duckdb.DuckDBPyConnection | SqlRunner


# Every statement strata runs is evaluated in UTC, as on Spark (`spark.sql.session.timeZone`): a
# TIMESTAMPTZ cut into days (`cast(ts as date)`, `date_trunc('day', ts)`) gives the same rows
# whatever the zone of the machine or process that runs it (a Dagster worker, a laptop's CLI).
EVALUATION_TIME_ZONE = "UTC"


def evaluate_in_utc(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """`con` with its session's time zone set to `EVALUATION_TIME_ZONE` (this connection only: an
    instance a notebook also holds keeps its own)."""
    set_option(con, "TimeZone", EVALUATION_TIME_ZONE, scope="SESSION")
    return con


def set_option(con: duckdb.DuckDBPyConnection, name: str, value: str, *, scope: str | None = None) -> None:
    """`SET [scope] name = 'value'` (DuckDB's default scope when None)."""
    setting = exp.EQ(this=exp.column(name), expression=exp.Literal.string(value))
    run(con, exp.Set(expressions=[exp.SetItem(this=setting, kind=scope)]))


@functools.lru_cache(maxsize=256)
def _parsed_type(name: str) -> exp.DataType:
    return exp.DataType.build(name, dialect=DIALECT)


def data_type(name: str) -> exp.DataType:
    """A DuckDB type by name, parsed once per process (a fresh copy each call: trees are mutable)."""
    return _parsed_type(name).copy()


def render(statement: exp.Expression, *, consume: bool = False) -> str:
    """The statement's DuckDB SQL. `consume`: the caller's last use of a tree no one else holds;
    sqlglot's generator may then rewrite it in place instead of deep-copying it first (most of the
    cost of rendering a large tree)."""
    return statement.sql(dialect=DIALECT, copy=not consume)


def is_duckdb(con: Connection) -> bool:
    """Whether `con` is DuckDB's own connection (else another backend's SqlRunner)."""
    return isinstance(con, duckdb.DuckDBPyConnection)


def run(
    con: Connection,
    statement: exp.Expression,
    params: list[Any] | None = None,
    *,
    consume: bool = False,
) -> Any:
    if isinstance(con, duckdb.DuckDBPyConnection):
        return con.execute(render(statement, consume=consume), params or [])
    return con.run_statement(statement, params, consume=consume)


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
