"""Row filters for the rows a segment replaces: its keys, or its partitions' ranges."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    NotNull,
    Or,
)
from pyiceberg.schema import Schema
from pyiceberg.types import DateType

from strata_dagster.sql.segments import partition_runs

# pyiceberg's predicates are pydantic models whose synthesized signatures mypy reads instead of
# their documented `(term, value)` constructors: called through these names, untyped.
_is_null: Any = IsNull
_not_null: Any = NotNull
_in: Any = In
_equal_to: Any = EqualTo
_at_least: Any = GreaterThanOrEqual
_less_than: Any = LessThan


def _known(column: str, predicate: BooleanExpression) -> BooleanExpression:
    """The predicate, false (never NULL) where the column is NULL. pyiceberg keeps the rows a
    delete's filter is not true for by `NOT filter`, adding `OR column IS NULL` only for columns
    the filter names in no null test: a NULL comparison inside a filter that also tests a column
    for NULL (a replaced key with a NULL part) would drop rows it does not match."""
    return And(_not_null(column), predicate)


def _any(parts: list[BooleanExpression]) -> BooleanExpression:
    if not parts:
        return AlwaysFalse()
    found = parts[0]
    for part in parts[1:]:
        found = Or(found, part)
    return found


def _literal(value: Any) -> Any:
    """Python values pyiceberg binds to any column type (dates and times as ISO text)."""
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    return value


def _bound(day: dt.date, schema: Schema, column: str) -> str:
    is_date = isinstance(schema.find_field(column).field_type, DateType)
    return day.isoformat() if is_date else f"{day.isoformat()}T00:00:00"


def replaced_filter(
    keys: pa.Table, merge_keys: tuple[str, ...], grain: str | None, schema: Schema
) -> BooleanExpression:
    """The rows whose keys `keys` holds (NULL-safe), or with a day/month `grain` the rows of those
    partitions, as ranges of the column on partition boundaries (whole files drop, none rewritten)."""
    rows = keys.select(list(merge_keys)).to_pylist()
    if grain in ("day", "month"):
        column = merge_keys[0]
        days = sorted({row[column] for row in rows if row[column] is not None})
        parts: list[BooleanExpression] = [
            _known(
                column,
                And(
                    _at_least(column, _bound(first, schema, column)),
                    _less_than(column, _bound(after, schema, column)),
                ),
            )
            for first, after in partition_runs(grain, [str(day)[:10] for day in days])
        ]
        if any(row[column] is None for row in rows):
            parts.append(_is_null(column))
        return _any(parts)
    if len(merge_keys) == 1:
        column = merge_keys[0]
        values = {_literal(row[column]) for row in rows if row[column] is not None}
        parts = [_known(column, _in(column, values))] if values else []
        if any(row[column] is None for row in rows):
            parts.append(_is_null(column))
        return _any(parts)
    matches: list[BooleanExpression] = []
    for row in {tuple(item[key] for key in merge_keys) for item in rows}:
        terms = [
            _is_null(key) if value is None else _known(key, _equal_to(key, _literal(value)))
            for key, value in zip(merge_keys, row, strict=True)
        ]
        match: BooleanExpression = terms[0]
        for term in terms[1:]:
            match = And(match, term)
        matches.append(match)
    return _any(matches)
