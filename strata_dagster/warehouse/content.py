"""Content identities computed inside DuckDB: order-independent, duplicate-sensitive row hashes."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
from sqlglot import exp

from strata_dagster.fingerprint import digest
from strata_dagster.warehouse.sql import ENGINE_VERSION, describe, run

# The alias a row is hashed through: hash(<alias>) hashes the whole row as a struct.
ROW_ALIAS = "__strata_row"

# The columns a row's hash covers: all of them (the empty tuple), or only a source's change column
# when the source is versioned by one (`versioning: cdc(col)`: by its contract every change advances
# that column, so its values alone tell what changed, at a fraction of the cost of hashing rows).
RowBasis = tuple[str, ...]
WHOLE_ROW: RowBasis = ()


@dataclass(frozen=True)
class Content:
    """What a relation holds: its schema, its row count, and a hash of its rows as a multiset."""

    columns: tuple[tuple[str, str], ...]
    row_count: int
    row_hash_sum: str
    basis: RowBasis = WHOLE_ROW

    @property
    def fingerprint(self) -> str:
        parts: tuple[object, ...] = (self.columns, self.row_count, self.row_hash_sum)
        if self.basis:
            parts += (("basis", self.basis),)
        return digest("content", ENGINE_VERSION, *parts)


def row_hash(basis: RowBasis = WHOLE_ROW) -> exp.Expression:
    """The hash of a row (aliased ROW_ALIAS) over `basis`."""
    if not basis:
        return exp.func("hash", exp.column(ROW_ALIAS))
    return exp.func("hash", *(exp.column(column, table=ROW_ALIAS) for column in basis))


def row_hash_aggregates(basis: RowBasis = WHOLE_ROW) -> list[exp.Expression]:
    # A sum of 64-bit row hashes in a HUGEINT: order-independent, and a duplicate row counts twice.
    row_hash_value = exp.cast(row_hash(basis), exp.DataType.build("HUGEINT"))
    return [
        exp.func("count_star"),
        exp.func("coalesce", exp.func("sum", row_hash_value), exp.Literal.number(0)),
    ]


def content_of(
    con: duckdb.DuckDBPyConnection,
    relation: exp.Table | exp.Query,
    basis: RowBasis = WHOLE_ROW,
    columns: tuple[tuple[str, str], ...] | None = None,
) -> Content:
    """The relation's content; `columns` when the caller has described it already."""
    columns = describe(con, relation) if columns is None else columns
    if isinstance(relation, exp.Query):
        source: exp.Expression = relation.subquery(ROW_ALIAS)
    else:
        source = relation.copy()
        source.set("alias", exp.TableAlias(this=exp.to_identifier(ROW_ALIAS)))
    row = run(con, exp.select(*row_hash_aggregates(basis)).from_(source)).fetchone()
    return Content(columns, int(row[0]), str(row[1]), basis)


def content_by_group(
    con: duckdb.DuckDBPyConnection,
    relation: exp.Table | exp.Query,
    key: exp.Expression,
    basis: RowBasis = WHOLE_ROW,
) -> dict[str | None, tuple[int, str]]:
    """Row count and row-hash sum per value of `key` (e.g. a partition expression), keyed by the
    value as text (None for NULL)."""
    if isinstance(relation, exp.Query):
        source: exp.Expression = relation.subquery(ROW_ALIAS)
    else:
        source = relation.copy()
        source.set("alias", exp.TableAlias(this=exp.to_identifier(ROW_ALIAS)))
    # Group by the value itself; cast to text only once per group.
    grouped = (
        exp.select(key.copy().as_("__key"), *row_hash_aggregates(basis))
        .from_(source)
        .group_by(exp.Literal.number(1))
    )
    query = exp.select(
        exp.cast(exp.column("__key"), exp.DataType.build("VARCHAR")),
        exp.Star(**{"except_": [exp.column("__key")]}),
    ).from_(grouped.subquery("__groups"))
    return {row[0]: (int(row[1]), str(row[2])) for row in run(con, query).fetchall()}
