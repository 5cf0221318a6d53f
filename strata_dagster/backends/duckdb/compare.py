"""Compare two relations as row multisets, inside DuckDB: does an incremental result equal a full one?

Each side is grouped by `hash(row)` (and by a partition key when given) with a row count and the
sums of its numeric columns per group; a FULL OUTER JOIN on the hash tells which groups only one
side has and which have different counts. One query, and only the figures come back to Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.sql.runner import Connection, run
from strata_dagster.backends.sql.session import connection_of
from strata_dagster.sql.content import ROW_ALIAS

Total = int | float | Decimal | None

_INTEGER_TYPES = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "U")
    for name in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT")
)
_FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
_FULL, _INCREMENTAL = "__full", "__incremental"
_PARTITION, _HASH, _ROWS, _SUM = "__partition", "__hash", "__rows", "__sum"
# Float sums depend on the order rows are added in; equal multisets agree to this relative precision.
FLOAT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ColumnTotal:
    """The sum of one numeric column on each side (None: the side has no such column, or no values)."""

    column: str
    full: Total
    incremental: Total

    @property
    def is_equal(self) -> bool:
        if self.full is None or self.incremental is None:
            return self.full is None and self.incremental is None
        if isinstance(self.full, float) or isinstance(self.incremental, float):
            return math.isclose(
                float(self.full), float(self.incremental), rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE
            )
        return self.full == self.incremental

    def as_metadata(self) -> dict[str, Any]:
        """Totals as exact text (DECIMAL sums exceed a float's precision)."""
        return {
            "full": None if self.full is None else str(self.full),
            "incremental": None if self.incremental is None else str(self.incremental),
            "is_equal": self.is_equal,
        }


@dataclass(frozen=True)
class Figures:
    """How an incremental result differs from a full rebuild (of a model, or of one partition).

    A hash group is the set of identical rows (same `hash(row)`) on one side. A group can be only in
    the full result, only in the incremental one, or in both with different row counts; the rows
    of both sides in such groups are `rows_in_mismatched_hash_groups` (a changed row counts twice:
    its old version and its new one). `history_rows` are incremental rows a full rebuild cannot
    give by design (see `compare(is_history=True)`); they are left out of every other figure.
    """

    full_rows: int = 0
    incremental_rows: int = 0
    hash_groups_only_in_full: int = 0
    hash_groups_only_in_incremental: int = 0
    hash_groups_with_count_mismatch: int = 0
    rows_in_mismatched_hash_groups: int = 0
    totals: tuple[ColumnTotal, ...] = ()
    history_rows: int = 0

    @property
    def row_delta(self) -> int:
        """Incremental rows minus full rows: negative when the incremental result lost rows."""
        return self.incremental_rows - self.full_rows

    @property
    def mismatched_totals(self) -> tuple[ColumnTotal, ...]:
        return tuple(total for total in self.totals if not total.is_equal)

    @property
    def is_equal(self) -> bool:
        return (
            self.row_delta == 0
            and self.hash_groups_only_in_full == 0
            and self.hash_groups_only_in_incremental == 0
            and self.hash_groups_with_count_mismatch == 0
            and self.rows_in_mismatched_hash_groups == 0
            and not self.mismatched_totals
        )

    def as_metadata(self) -> dict[str, Any]:
        return {
            "is_equal": self.is_equal,
            "full_rows": self.full_rows,
            "incremental_rows": self.incremental_rows,
            "row_delta": self.row_delta,
            "hash_groups_only_in_full": self.hash_groups_only_in_full,
            "hash_groups_only_in_incremental": self.hash_groups_only_in_incremental,
            "hash_groups_with_count_mismatch": self.hash_groups_with_count_mismatch,
            "rows_in_mismatched_hash_groups": self.rows_in_mismatched_hash_groups,
            "history_rows": self.history_rows,
            "numeric_totals": {total.column: total.as_metadata() for total in self.totals},
        }


def combine(figures: Iterable[Figures]) -> Figures:
    """Figures of several partitions as one (identical rows share a partition, so groups add up)."""
    parts = list(figures)
    names = list(dict.fromkeys(total.column for part in parts for total in part.totals))
    return Figures(
        full_rows=sum(part.full_rows for part in parts),
        incremental_rows=sum(part.incremental_rows for part in parts),
        hash_groups_only_in_full=sum(part.hash_groups_only_in_full for part in parts),
        hash_groups_only_in_incremental=sum(part.hash_groups_only_in_incremental for part in parts),
        hash_groups_with_count_mismatch=sum(part.hash_groups_with_count_mismatch for part in parts),
        rows_in_mismatched_hash_groups=sum(part.rows_in_mismatched_hash_groups for part in parts),
        totals=tuple(
            ColumnTotal(
                name,
                _add(total.full for part in parts for total in part.totals if total.column == name),
                _add(total.incremental for part in parts for total in part.totals if total.column == name),
            )
            for name in names
        ),
        history_rows=sum(part.history_rows for part in parts),
    )


def _add(values: Iterable[Total]) -> Total:
    present = [value for value in values if value is not None]
    return sum(present[1:], present[0]) if present else None


def schema_differences(session: Session, full: exp.Table, incremental: exp.Table) -> tuple[str, ...]:
    """Human-readable differences between the two sides' columns (names, types, order)."""
    full_columns = _describe(connection_of(session), full)
    incremental_columns = dict(_describe(connection_of(session), incremental))
    problems = []
    for name, type_ in full_columns:
        if name not in incremental_columns:
            problems.append(f"column `{name}` is missing from the incremental result")
        elif incremental_columns[name] != type_:
            problems.append(f"`{name}` is {incremental_columns[name]} incrementally, {type_} in full")
    extra = [name for name in incremental_columns if name not in dict(full_columns)]
    problems.extend(f"column `{name}` is only in the incremental result" for name in extra)
    if not problems and [name for name, _ in full_columns] != list(incremental_columns):
        problems.append("the columns are in a different order")
    return tuple(problems)


def compare(
    session: Session,
    full: exp.Table,
    incremental: exp.Table,
    *,
    columns: Sequence[str] | None = None,
    partition_key: exp.Expr | None = None,
    where: exp.Expr | None = None,
    is_history: bool = False,
) -> dict[str | None, Figures]:
    """Figures per partition (the key as text; None when unpartitioned or for a NULL key).

    `columns` compares only those columns (default: whole rows). `partition_key` and `where` are
    expressions over the compared columns. With `is_history`, groups only in the incremental
    result are history kept on purpose (an append model's earlier versions of a row): counted as
    `history_rows`, left out of the other figures. Partitions with no rows on either side do not
    appear; an unpartitioned comparison always has its one entry.
    """
    try:
        sides = (_rows_of(full, columns), _rows_of(incremental, columns))
        numeric = [_numeric_columns(connection_of(session), side) for side in sides]
        names = list(dict.fromkeys([*numeric[0], *numeric[1]]))
        query = _comparison(sides, numeric, names, partition_key, where, is_history)
        rows = run(connection_of(session), query).fetchall()
    except duckdb.Error as error:
        raise WarehouseError(str(error).splitlines()[0]) from None
    figures = {row[0]: _figures(row[1:], names) for row in rows}
    if partition_key is None and not figures:
        figures[None] = Figures(totals=tuple(ColumnTotal(name, None, None) for name in names))
    return dict(sorted(figures.items(), key=lambda item: (item[0] is None, item[0] or "")))


def _figures(values: Sequence[Any], names: list[str]) -> Figures:
    counts = [int(value) for value in values[:7]]
    sums = values[7:]
    totals = tuple(
        ColumnTotal(name, sums[2 * index], sums[2 * index + 1]) for index, name in enumerate(names)
    )
    leading = cast("tuple[int, int, int, int, int, int]", tuple(counts[:6]))
    return Figures(*leading, totals=totals, history_rows=counts[6])


def _describe(con: Connection, relation: exp.Expr) -> tuple[tuple[str, str], ...]:
    query = relation if isinstance(relation, exp.Query) else exp.select("*").from_(relation.copy())
    try:
        return tuple((str(row[0]), str(row[1])) for row in run(con, exp.Describe(this=query)).fetchall())
    except duckdb.Error as error:
        raise WarehouseError(str(error).splitlines()[0]) from None


def _rows_of(relation: exp.Table, columns: Sequence[str] | None) -> exp.Query:
    """The compared rows: the whole relation, or only `columns` of it."""
    projection = [exp.column(name) for name in columns] if columns else [exp.Star()]
    return exp.select(*projection).from_(relation.copy())


def _numeric_columns(con: Connection, rows: exp.Query) -> dict[str, str]:
    """Numeric column -> the aggregate that sums it (`fsum` for floats: order matters less)."""
    sums = {}
    for name, type_ in _describe(con, rows):
        if type_ in _INTEGER_TYPES or type_.startswith("DECIMAL"):
            sums[name] = "sum"
        elif type_ in _FLOAT_TYPES:
            sums[name] = "fsum"
    return sums


def _side(
    rows: exp.Query,
    numeric: dict[str, str],
    names: list[str],
    partition_key: exp.Expr | None,
    where: exp.Expr | None,
) -> exp.Select:
    """Per (partition, row hash): the row count and the sums of the numeric columns."""
    key = partition_key.copy() if partition_key is not None else exp.null()
    sums = [
        exp.func(numeric[name], exp.column(name, table=ROW_ALIAS)).as_(f"{_SUM}{index}")
        for index, name in enumerate(names)
        if name in numeric
    ]
    query = (
        exp.select(
            exp.cast(key, exp.DataType.build("VARCHAR")).as_(_PARTITION),
            exp.func("hash", exp.column(ROW_ALIAS)).as_(_HASH),
            exp.func("count_star").as_(_ROWS),
            *sums,
        )
        .from_(rows.subquery(ROW_ALIAS))
        .group_by(exp.Literal.number(1), exp.Literal.number(2))
    )
    return query.where(where.copy()) if where is not None else query


def _comparison(
    sides: tuple[exp.Query, exp.Query],
    numeric: list[dict[str, str]],
    names: list[str],
    partition_key: exp.Expr | None,
    where: exp.Expr | None,
    is_history: bool,
) -> exp.Select:
    def col(side: str, name: str) -> exp.Column:
        return exp.column(name, table=side)

    # In history mode the incremental side only counts in groups the full side also has.
    kept = col(_FULL, _HASH).is_(exp.null()).not_() if is_history else None

    def aggregate(function: exp.Expr, *conditions: exp.Expr | None) -> exp.Expr:
        present = [condition for condition in conditions if condition is not None]
        if present:
            function = exp.Filter(this=function, expression=exp.Where(this=exp.and_(*present)))
        return exp.func("coalesce", function, exp.Literal.number(0))

    def rows(side: str) -> exp.Expr:
        return exp.func("coalesce", col(side, _ROWS), exp.Literal.number(0))

    only_in_full = col(_INCREMENTAL, _HASH).is_(exp.null())
    only_in_incremental = col(_FULL, _HASH).is_(exp.null())
    counts_differ = exp.NEQ(this=col(_FULL, _ROWS), expression=col(_INCREMENTAL, _ROWS))
    groups_differ = exp.NullSafeNEQ(this=col(_FULL, _ROWS), expression=col(_INCREMENTAL, _ROWS))
    history = (
        aggregate(exp.func("sum", col(_INCREMENTAL, _ROWS)), only_in_incremental.copy())
        if is_history
        else exp.Literal.number(0)
    )
    sums: list[exp.Expr] = []
    for index, name in enumerate(names):
        for side, condition in ((_FULL, None), (_INCREMENTAL, kept)):
            is_present = name in numeric[0 if side == _FULL else 1]
            value: exp.Expr = exp.func("sum", col(side, f"{_SUM}{index}")) if is_present else exp.null()
            if is_present and condition is not None:
                value = exp.Filter(this=value, expression=exp.Where(this=condition.copy()))
            sums.append(value)
    return (
        exp.select(
            exp.func("coalesce", col(_FULL, _PARTITION), col(_INCREMENTAL, _PARTITION)),
            aggregate(exp.func("sum", col(_FULL, _ROWS))),
            aggregate(exp.func("sum", col(_INCREMENTAL, _ROWS)), kept),
            aggregate(exp.func("count_star"), only_in_full),
            aggregate(exp.func("count_star"), only_in_incremental, kept),
            aggregate(exp.func("count_star"), counts_differ),
            aggregate(
                exp.func("sum", exp.Add(this=rows(_FULL), expression=rows(_INCREMENTAL))), groups_differ, kept
            ),
            history,
            *sums,
        )
        .with_(_FULL, as_=_side(sides[0], numeric[0], names, partition_key, where))
        .with_(_INCREMENTAL, as_=_side(sides[1], numeric[1], names, partition_key, where))
        .from_(exp.Table(this=exp.to_identifier(_FULL)))
        .join(
            exp.Table(this=exp.to_identifier(_INCREMENTAL)),
            on=exp.and_(
                exp.EQ(this=col(_FULL, _HASH), expression=col(_INCREMENTAL, _HASH)),
                exp.NullSafeEQ(this=col(_FULL, _PARTITION), expression=col(_INCREMENTAL, _PARTITION)),
            ),
            join_type="FULL OUTER",
        )
        .group_by(exp.Literal.number(1))
    )
