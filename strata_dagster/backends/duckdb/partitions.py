"""Partitions seen from the data, read-only: per-partition content, partition bounds, partition rows.

An orchestrator's partition keys are ISO dates: `2025-03-04` for a day, `2025-03-01` for a month.
Every function here computes the key with the same expression, inside DuckDB, so a partition's
content identity means the same thing wherever it is computed (a source, a live view, a frame).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.backends.duckdb.session import warehouse_errors
from strata_dagster.backends.sql.figures import content_by_group
from strata_dagster.backends.sql.runner import run
from strata_dagster.backends.sql.session import connection_of
from strata_dagster.sql.content import WHOLE_ROW, Content, RowBasis

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa

_DATE = exp.DataType.build("DATE")
_KEY_ALIAS = "__partition"


def partition_key(column: str, grain: str, qualifier: str | None = None) -> exp.Expr:
    """The partition a row falls in, as a DATE: its day (`day`, `key`) or the month's first day."""
    value: exp.Expr = exp.column(column, table=qualifier)
    if grain == "month":
        value = exp.func("date_trunc", exp.Literal.string("month"), value)
    return exp.cast(value, _DATE)


def _key_condition(column: str, grain: str, keys: Sequence[str]) -> exp.Expr:
    dates = [exp.cast(exp.Literal.string(key), _DATE) for key in keys]
    return exp.In(this=partition_key(column, grain), expressions=dates)


def content_by_partition(
    session: Session,
    relation: exp.Table,
    column: str,
    grain: str,
    columns: tuple[tuple[str, str], ...],
    basis: RowBasis = WHOLE_ROW,
) -> dict[str, Content]:
    """Each partition's content (schema `columns`, rows, row-hash sum) keyed by its ISO date.

    Rows whose partition column is NULL belong to no partition and are left out.
    """
    with warehouse_errors():
        groups = content_by_group(connection_of(session), relation, partition_key(column, grain), basis)
    return {
        key: Content(columns, rows, hash_sum, basis)  # type: ignore[misc]  # a NULL partition (key None) passes this test: a known gap
        for key, (rows, hash_sum) in groups.items()
        if key != "None"
    }


def partition_bounds(
    session: Session, query: exp.Query, column: str, grain: str
) -> tuple[dt.date, dt.date] | None:
    """The first and last partition the rows of `query` fall in; None when it has no dated row."""
    key = partition_key(column, grain, qualifier=_KEY_ALIAS)
    bounds = exp.select(exp.func("min", key), exp.func("max", key)).from_(query.subquery(_KEY_ALIAS))
    with warehouse_errors():
        row = run(connection_of(session), bounds).fetchone()
    if row is None or row[0] is None:
        return None
    return row[0], row[1]


def read_rows(
    session: Session,
    relation: exp.Table,
    *,
    column: str | None = None,
    grain: str | None = None,
    keys: Sequence[str] | None = None,
) -> pa.Table:
    """The rows of `relation` (only those of the partitions `keys` when given) as an Arrow table."""
    query = exp.select("*").from_(relation.copy())
    if keys is not None and column is not None and grain is not None:
        query = query.where(_key_condition(column, grain, keys))
    return session.read_arrow(query)
