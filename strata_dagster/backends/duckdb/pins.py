"""Pins (`unique`, `contract`) measured on any relation, a live view included, with the figures a
report needs: how many key values repeat and which, which columns break the contract and how.

The build gate (`tables.unique_violation`, `tables.contract_violation`) refuses a new snapshot with
one message; these answer the same questions about what is live now, for the Dagster asset checks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.sql.runner import describe, run
from strata_dagster.backends.sql.session import connection_of
from strata_dagster.backends.sql.tables import canonical_types, null_counts

_COPIES = "__copies"
_DUPLICATES = "__duplicates"
ContractProblemKind = Literal["missing", "unknown_type", "type", "nulls"]


@dataclass(frozen=True)
class Duplicates:
    """Key values held by more than one row: how many, the rows holding them, and a sample."""

    columns: tuple[str, ...]
    key_values: int = 0
    rows: int = 0
    max_copies: int = 0
    samples: tuple[dict[str, Any], ...] = ()  # each: the key's columns and `copies`

    @property
    def is_unique(self) -> bool:
        return self.key_values == 0


@dataclass(frozen=True)
class ContractProblem:
    column: str
    kind: ContractProblemKind
    expected: str  # the contract's type (DuckDB's spelling when it is one), or `not null`
    actual: str | None = None  # the relation's type (None: no such column)
    null_rows: int = 0

    @property
    def message(self) -> str:
        if self.kind == "missing":
            return f"column `{self.column}` is missing"
        if self.kind == "unknown_type":
            return f"`{self.column}`: `{self.expected}` is not a DuckDB type"
        if self.kind == "type":
            return f"`{self.column}` is {self.actual}, the contract says {self.expected}"
        return f"`{self.column}` has {self.null_rows} NULL value(s) but is `not null`"


def duplicate_keys(
    session: Session, relation: exp.Table, columns: Sequence[str], *, sample: int = 5
) -> Duplicates:
    """Values of `columns` that more than one row of `relation` holds (NULL keys repeat, as in the
    build gate); `sample` of them, the most repeated first."""
    keys = [exp.column(column) for column in columns]
    duplicates = (
        exp.select(*keys, exp.func("count_star").as_(_COPIES))
        .from_(relation.copy())
        .group_by(*keys)
        .having(exp.GT(this=exp.func("count_star"), expression=exp.Literal.number(1)))
    )
    copies = exp.column(_COPIES)
    totals = exp.select(
        exp.func("count_star"),
        exp.func("coalesce", exp.func("sum", copies.copy()), exp.Literal.number(0)),
        exp.func("coalesce", exp.func("max", copies.copy()), exp.Literal.number(0)),
    ).from_(duplicates.subquery(_DUPLICATES))
    examples = (
        exp.select(*[key.copy() for key in keys], copies.copy())
        .from_(duplicates.subquery(_DUPLICATES))
        .order_by(exp.Ordered(this=copies.copy(), desc=True), *[key.copy() for key in keys])
        .limit(sample)
    )
    try:
        key_values, rows, max_copies = run(connection_of(session), totals).fetchone() or (0, 0, 0)
        shown = run(connection_of(session), examples).fetchall() if key_values else []
    except duckdb.Error as error:
        raise WarehouseError(str(error).splitlines()[0]) from None
    return Duplicates(
        tuple(columns),
        int(key_values),
        int(rows),
        int(max_copies),
        tuple(
            {
                **{column: _plain(value) for column, value in zip(columns, row, strict=False)},
                "copies": row[-1],
            }
            for row in shown
        ),
    )


def contract_problems(
    session: Session, relation: exp.Table, contract: Sequence[tuple[str, str, bool]]
) -> tuple[ContractProblem, ...]:
    """How `relation` breaks `contract`, a list of (column, type, is_not_null): missing columns,
    other types, NULLs in `not null` columns (counted in one scan)."""
    con = connection_of(session)
    try:
        actual = dict(describe(con, relation))
        spelled = canonical_types(con, [type_text for column, type_text, _ in contract if column in actual])
        problems: list[ContractProblem] = []
        not_null: list[str] = []
        for column, type_text, is_not_null in contract:
            if column not in actual:
                problems.append(ContractProblem(column, "missing", type_text))
                continue
            expected = spelled[type_text]
            if expected is None:
                problems.append(ContractProblem(column, "unknown_type", type_text, actual[column]))
                continue
            if actual[column] != expected:
                problems.append(ContractProblem(column, "type", expected, actual[column]))
            if is_not_null:
                not_null.append(column)
        if not_null:
            problems.extend(
                ContractProblem(column, "nulls", "not null", actual[column], nulls)
                for column, nulls in zip(not_null, null_counts(con, relation, not_null), strict=True)
                if nulls
            )
    except duckdb.Error as error:
        raise WarehouseError(str(error).splitlines()[0]) from None
    return tuple(problems)


def row_count(session: Session, relation: exp.Table) -> int:
    try:
        row = run(
            connection_of(session), exp.select(exp.func("count_star")).from_(relation.copy())
        ).fetchone()
    except duckdb.Error as error:
        raise WarehouseError(str(error).splitlines()[0]) from None
    return int(row[0]) if row else 0


def _plain(value: Any) -> Any:
    """A key value as JSON shows it (dates as ISO text, decimals as exact text)."""
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
