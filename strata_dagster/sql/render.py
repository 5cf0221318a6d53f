"""Names and rendering of the SQL strata builds: tables quoted as needed, DuckDB's dialect (the one
models are written in; another backend renders the same trees its own way)."""

from __future__ import annotations

import functools

from sqlglot import exp

from strata_dagster.language.render_memo import rendered

# The schema every snapshot lives in (the history's own is state/migrations.py's HISTORY_SCHEMA).
SNAPSHOT_SCHEMA = "strata_snapshots"

DIALECT = "duckdb"


# Types built as DuckDB's parser builds them, without it (test_render checks each against it): a
# run that needs no other type imports no dialect.
_BUILT_TYPES = {"HUGEINT": "INT128", "DATE": "DATE", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE"}


@functools.lru_cache(maxsize=256)
def _parsed_type(name: str) -> exp.DataType:
    built = _BUILT_TYPES.get(name)
    if built is not None:
        return exp.DataType(this=exp.DataType.Type[built], expressions=None, nested=False)
    return exp.DataType.build(name, dialect=DIALECT)


def data_type(name: str) -> exp.DataType:
    """A DuckDB type by name, parsed once per process (a fresh copy each call: trees are mutable)."""
    return _parsed_type(name).copy()


def render(statement: exp.Expr, *, consume: bool = False) -> str:
    """The statement's DuckDB SQL. `consume`: the caller's last use of a tree no one else holds;
    sqlglot's generator may then rewrite it in place instead of deep-copying it first (most of the
    cost of rendering a large tree)."""
    return rendered(statement, DIALECT, copy=not consume)


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
