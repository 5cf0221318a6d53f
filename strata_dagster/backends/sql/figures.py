"""Content figures both SQL backends compute the same way: row counts, row-hash sums, windows,
and the small work tables a delta reads (keys, values). Each runs one statement (or a few) through
the session's connection, in that backend's dialect (backends.sql.runner.run)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from strata_dagster.backends.sql.runner import Connection, describe, is_duckdb, run
from strata_dagster.backends.sql.snapshot_kinds import SnapshotKinds
from strata_dagster.backends.sql.tables import create_snapshot
from strata_dagster.sql.content import (
    EMPTY_FIGURE,
    ROW_ALIAS,
    WHOLE_ROW,
    Content,
    RowBasis,
    as_rows,
    is_summed,
    row_hash_aggregates,
)
from strata_dagster.sql.render import data_type, snapshot_table
from strata_dagster.sql.segments import (
    TypedTexts,
    WindowStats,
    key_extremes,
    keys_query,
    typed_literal,
    window_predicate,
)
from strata_dagster.state.ledger import PartitionEvidence, order_of


def content_of(
    con: Connection,
    relation: exp.Table | exp.Query,
    basis: RowBasis = WHOLE_ROW,
    columns: tuple[tuple[str, str], ...] | None = None,
) -> Content:
    """The relation's content; `columns` when the caller has described it already."""
    columns = describe(con, relation) if columns is None else columns
    row = run(con, exp.select(*row_hash_aggregates(basis)).from_(as_rows(relation))).fetchone()
    return Content(columns, int(row[0]), str(row[1]), basis)


def content_by_group(
    con: Connection,
    relation: exp.Table | exp.Query,
    key: exp.Expr,
    basis: RowBasis = WHOLE_ROW,
) -> dict[str | None, tuple[int, str]]:
    """Row count and row-hash sum per value of `key` (e.g. a partition expression), keyed by the
    value as text (None for NULL)."""
    groups = content_by_groups(con, relation, [key], basis)
    return {values[0]: figures for values, figures in groups.items()}


def content_by_groups(
    con: Connection,
    relation: exp.Table | exp.Query,
    keys: Sequence[exp.Expr],
    basis: RowBasis = WHOLE_ROW,
    limit: int | None = None,
) -> dict[tuple[str | None, ...], tuple[int, str]]:
    """`content_by_group` over several keys at once: the figures per combination of their values
    (at most `limit` combinations, any of them, when given)."""
    names = [f"__key{index}" for index in range(len(keys))]
    # Group by the values themselves; cast to text only once per group.
    grouped = (
        exp.select(
            *(key.copy().as_(name) for key, name in zip(keys, names, strict=True)),
            *row_hash_aggregates(basis),
        )
        .from_(as_rows(relation))
        .group_by(*(exp.Literal.number(index + 1) for index in range(len(keys))))
    )
    query = exp.select(
        *(exp.cast(exp.column(name), data_type("VARCHAR")) for name in names),
        exp.Star(**{"except_": [exp.column(name) for name in names]}),
    ).from_(grouped.subquery("__groups"))
    if limit is not None:
        query = query.limit(limit)
    width = len(keys)
    return {tuple(row[:width]): (int(row[width]), str(row[width + 1])) for row in run(con, query).fetchall()}


def window_stats(
    con: Connection,
    relation: exp.Table | exp.Query,
    cdc: exp.Expr,
    low: exp.Expr | None,
    lateness: exp.Expr | None,
    totals: tuple[int, str] | None = None,
    basis: RowBasis = WHOLE_ROW,
) -> WindowStats:
    """The frozen upper bound (MAX(cdc) now), the window (low, high], and the region outside it.

    `totals` (row count and row-hash sum of the whole relation, read in this transaction) spare a
    scan: the regions are then the totals less the few rows above a bound, which DuckDB reads with
    the bound pushed into the scan. NULL cdc values count as outside every window. The figures are
    over `basis`, the totals' basis; on a change-column basis only the counts subtract."""
    bound = run(
        con,
        exp.select(
            exp.cast(exp.func("max", cdc.copy()), "VARCHAR"), exp.func("typeof", exp.func("max", cdc.copy()))
        ).from_(as_rows(relation)),
    ).fetchone()
    high_text, cdc_type = bound[0], str(bound[1])
    count, figure = content_where(con, relation, basis=basis) if totals is None else totals
    window, above_next = (0, EMPTY_FIGURE), (0, EMPTY_FIGURE)
    if high_text is not None:
        high = typed_literal(high_text, cdc_type)
        if low is not None:
            window = content_where(con, relation, window_predicate(cdc, low, high), basis)
        if lateness is not None:
            threshold = exp.Sub(this=high.copy(), expression=lateness.copy())
            above_next = content_where(con, relation, exp.GT(this=cdc.copy(), expression=threshold), basis)
    return WindowStats(
        high=high_text,
        cdc_type=cdc_type,
        window_rows=window[0] if low is not None else None,
        old_count=count - window[0],
        old_hash_sum=_less(figure, window[1], basis),
        next_count=count - above_next[0],
        next_hash_sum=_less(figure, above_next[1], basis),
    )


def _less(total: str, part: str, basis: RowBasis) -> str | None:
    """The row-hash sum of the rows outside `part`; None when the figures are ranges, not sums."""
    return str(int(total) - int(part)) if is_summed(basis) else None


def create_keys_table(
    con: Connection,
    name: str,
    relation: exp.Table | exp.Query,
    keys: Sequence[tuple[str, exp.Expr]],
    window: exp.Expr,
    deleted_from: exp.Query | None,
    merge_keys: Sequence[str],
    reread: tuple[exp.Query, exp.Expr] | None = None,
    *,
    files: SnapshotKinds,
) -> int:
    """Keys of the raw source rows in the window (before any filter), plus keys no longer in the
    source at all when `deleted_from` (the previous state) is given, plus the keys of the previous
    state's rows where `reread` = (state, condition) holds. Returns how many."""
    create_snapshot(con, name, keys_query(relation, keys, window, deleted_from, merge_keys, reread), files)
    return int(run(con, exp.select(exp.Count(this=exp.Star())).from_(snapshot_table(name))).fetchone()[0])


def max_value(con: Connection, relation: exp.Table | exp.Query, column: str) -> tuple[str | None, str]:
    """MAX(column) of a relation's rows as text, with its type."""
    value = exp.func("max", exp.column(column))
    row = run(
        con,
        exp.select(exp.cast(value, "VARCHAR"), exp.func("typeof", value.copy())).from_(as_rows(relation)),
    ).fetchone()
    return row[0], str(row[1])


def counts_at_or_below(
    con: Connection,
    relation: exp.Table | exp.Query,
    column: exp.Expr,
    bounds: Sequence[exp.Expr],
) -> list[int]:
    """How many rows of `relation` have `column` at or below each bound, in one scan."""
    counts = [exp.func("count_if", exp.LTE(this=column.copy(), expression=bound.copy())) for bound in bounds]
    row = run(con, exp.select(*counts).from_(as_rows(relation))).fetchone()
    return [int(value or 0) for value in row]


def content_where(
    con: Connection,
    relation: exp.Table | exp.Query,
    condition: exp.Expr | None = None,
    basis: RowBasis = WHOLE_ROW,
) -> tuple[int, str]:
    """Row count and row-hash sum (over `basis`) of the rows of `relation` (aliased ROW_ALIAS)
    meeting `condition`."""
    statement = exp.select(*row_hash_aggregates(basis)).from_(as_rows(relation))
    if condition is not None:
        statement = statement.where(condition.copy())
    row = run(con, statement).fetchone()
    return int(row[0]), str(row[1])


def _key_hash_sum(columns: Sequence[str]) -> exp.Expr:
    hashed = exp.func("hash", *(exp.column(column, table=ROW_ALIAS) for column in columns))
    summed = exp.func("sum", exp.cast(hashed, data_type("HUGEINT")))
    return exp.func("coalesce", summed, exp.Literal.number(0))


def content_and_key_sum_where(
    con: Connection, query: exp.Query, condition: exp.Expr, columns: Sequence[str]
) -> tuple[int, str, str]:
    """`content_where`, plus the sum of a hash of only `columns` over the same rows, in one scan."""
    count, hash_sum = row_hash_aggregates()
    statement = exp.select(count, hash_sum, _key_hash_sum(columns)).from_(as_rows(query)).where(condition)
    row = run(con, statement).fetchone()
    return int(row[0]), str(row[1]), str(row[2])


def content_and_key_sum(
    con: Connection,
    table: exp.Table,
    columns: Sequence[str],
    described: tuple[tuple[str, str], ...] | None = None,
) -> tuple[Content, tuple[int, str]]:
    """`content_of` the table and its `key_sum` over `columns`, in one scan of it (`described`: its
    columns, when the caller has described it already)."""
    described = describe(con, table) if described is None else described
    statement = exp.select(*row_hash_aggregates(), _key_hash_sum(columns)).from_(as_rows(table))
    row = run(con, statement).fetchone()
    return Content(described, int(row[0]), str(row[1])), (int(row[0]), str(row[2]))


def key_sum(con: Connection, relation: exp.Table | exp.Query, columns: Sequence[str]) -> tuple[int, str]:
    """Row count and the sum of a hash of only `columns` (e.g. merge keys and cdc column)."""
    statement = exp.select(exp.func("count_star"), _key_hash_sum(columns)).from_(as_rows(relation))
    row = run(con, statement).fetchone()
    return int(row[0]), str(row[1])


def key_sum_and_extremes(
    con: Connection, relation: exp.Table | exp.Query, columns: Sequence[str], key: str
) -> tuple[int, str, str | None, str | None, str | None]:
    """`key_sum`, and `key_extremes` of `key`, in one scan."""
    statement = exp.select(
        exp.func("count_star"), _key_hash_sum(columns), *key_extremes(exp.column(key, table=ROW_ALIAS))
    ).from_(as_rows(relation))
    row = run(con, statement).fetchone()
    return int(row[0]), str(row[1]), row[2], row[3], None if row[4] is None else str(row[4])


def create_values_table(
    con: Connection,
    name: str,
    column: str,
    values: TypedTexts,
    files: SnapshotKinds,
) -> None:
    """A one-column table holding `values` (e.g. the partitions a segment replaces)."""
    if is_duckdb(con):
        _create_from_texts(con, name, column, data_type(values.type_name), list(values.texts), files)
        return
    rows = exp.values(
        [exp.Tuple(expressions=[value]) for value in values.literals()], alias="__values", columns=[column]
    )
    query = exp.select(exp.column(column)).from_(rows)
    create_snapshot(con, name, query, files)


_VALUES_STAGING = exp.Table(this=exp.to_identifier("__strata_values"), db=exp.to_identifier("temp"))


def _create_from_texts(
    con: Connection,
    name: str,
    column: str,
    to: exp.DataType,
    texts: list[str | None],
    files: SnapshotKinds,
) -> None:
    """The values table from one list parameter (DuckDB): a literal VALUES of thousands of keys
    costs more to build, render and parse than the table's write (the keys of 1,000 changed
    orders: about 40 ms against 5)."""
    listed = exp.cast(exp.Placeholder(), data_type("VARCHAR[]"))
    staged = exp.select(exp.cast(exp.Unnest(expressions=[listed]), to.copy()).as_(column))
    temporary = exp.Properties(expressions=[exp.TemporaryProperty()])
    run(
        con,
        exp.Create(this=_VALUES_STAGING, kind="TABLE", expression=staged, properties=temporary, replace=True),
        [texts],
    )
    try:
        create_snapshot(con, name, exp.select(exp.column(column)).from_(_VALUES_STAGING.copy()), files)
    finally:
        run(con, exp.Drop(tables=[_VALUES_STAGING.copy()], kind="TABLE", exists=True))


def count_null_keys(con: Connection, name: str, keys: Sequence[str]) -> int:
    """Rows of a keys table with a NULL in any key column."""
    condition = exp.or_(*(exp.Is(this=exp.column(key), expression=exp.null()) for key in keys))
    row = run(
        con, exp.select(exp.Count(this=exp.Star())).from_(snapshot_table(name)).where(condition)
    ).fetchone()
    return int(row[0]) if row else 0


def list_table_partitions(
    con: Connection, relation: exp.Table, key: exp.Expr, column: str
) -> list[PartitionEvidence]:
    """Each partition's row count and the range of its partition column, from that column alone."""
    value = exp.column(column)
    query = (
        exp.select(
            exp.cast(key.copy(), data_type("VARCHAR")).as_("__key"),
            exp.func("count_star"),
            exp.cast(exp.func("min", value), data_type("VARCHAR")),
            exp.cast(exp.func("max", value.copy()), data_type("VARCHAR")),
        )
        .from_(relation.copy())
        .where(exp.not_(exp.Is(this=value.copy(), expression=exp.null())))
        .group_by(exp.Literal.number(1))
    )
    partitions = [
        PartitionEvidence(str(name), int(rows), f"rows={rows} min={low} max={high}")
        for name, rows, low, high in run(con, query).fetchall()
    ]
    partitions.sort(key=lambda item: order_of(item.key))
    return partitions
