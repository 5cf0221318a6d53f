"""Incremental snapshots as immutable segments: a base plus delta segments composed by a view.

An upsert delta segment comes with a keys table: the keys it replaces in every earlier segment
(changed keys taken from the raw source rows in the window, plus keys deleted from the source).
The live view is, per segment, its rows whose keys no later segment replaces, all UNION ALL'd;
append and append_new segments only add rows. Nothing is ever written into a published table.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from sqlglot import exp

from strata_dagster.sql.content import as_rows
from strata_dagster.sql.render import data_type, snapshot_table

KEYS_ALIAS = "__keys"


@dataclass(frozen=True)
class Segment:
    table: str
    keys_table: str | None = None  # keys this segment replaces in the segments before it
    is_null_free: bool = False  # its keys table holds no NULL key (as its build counted)


def _null_safe_match(keys: Sequence[str], left: str, right: str) -> exp.Expr:
    return exp.and_(
        *(
            exp.NullSafeEQ(this=exp.column(key, table=left), expression=exp.column(key, table=right))
            for key in keys
        )
    )


# How many buckets a key is hashed into by the `bucket` grain (engine/builds/key_buckets.py): enough that
# a few thousand scattered changes reach a small share of the rows, few enough that a bucket's
# figures table stays small beside the source.
KEY_BUCKETS = 1 << 17
# An integer key is cut into blocks of this many consecutive values instead (`block` grain): new
# keys, mostly above the old ones, fall in a few new blocks where hashing scatters them.
KEY_BLOCK = 64
KEY_GRAINS = ("bucket", "block")  # the grains of a source's key (engine/builds/key_buckets.py)


def partition_key(value: exp.Expr, grain: str | None) -> exp.Expr:
    """The partition a value falls in: its day, its month (first day), its key bucket or block, or
    itself."""
    if grain == "block":
        return exp.IntDiv(this=value.copy(), expression=exp.Literal.number(KEY_BLOCK))
    if grain == "bucket":
        return exp.Mod(this=exp.func("hash", value.copy()), expression=exp.Literal.number(KEY_BUCKETS))
    if grain == "day":
        return exp.cast(value.copy(), data_type("DATE"))
    if grain == "month":
        return exp.cast(exp.func("date_trunc", exp.Literal.string("month"), value.copy()), data_type("DATE"))
    return value.copy()


# Column types whose order is the order of their day and month (CAST(x AS DATE) is monotone in x,
# independent of any session setting).
RANGE_TYPES = frozenset({"DATE", "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"})


def _next_partition(start: date, grain: str) -> date:
    if grain == "day":
        return start + timedelta(days=1)
    return date(start.year + start.month // 12, start.month % 12 + 1, 1)


# Up to this many runs of consecutive partitions, their ranges alone select the partitions' rows;
# past it a per-row OR of ranges costs more than a hash semi-join on the keys (at 50 runs over 5M
# rows: 0.53 s against 0.36 s for one span and the semi-join; 10 runs: the same).
MAX_EXACT_RANGES = 8
# Where row-group statistics show that the ranges skip most of the rows, they stay worth it up to
# this many runs: over 9.6M rows clustered by the column, 24 runs cost 0.27 s against 0.30 s for
# the span and the semi-join, 16 runs 0.16 s against 0.35 s, 50 runs 0.58 s against 0.42 s.
MAX_SKIPPING_RANGES = 24


@dataclass(frozen=True)
class PartitionRanges:
    predicate: exp.Expr
    is_exact: bool  # the predicate holds for exactly the partitions' rows: no key match is needed


def partition_runs(grain: str, keys: Sequence[str]) -> list[tuple[date, date]]:
    """Day or month partitions `keys` (ISO dates) as runs of consecutive partitions: the first
    day of each run and the first day after it."""
    starts = sorted(date.fromisoformat(key) for key in keys)
    runs: list[list[date]] = []
    for start in starts:
        if runs and _next_partition(runs[-1][1], grain) >= start:
            runs[-1][1] = max(runs[-1][1], start)
        else:
            runs.append([start, start])
    return [(first, _next_partition(last, grain)) for first, last in runs]


def partition_ranges(
    column: exp.Expr,
    type_name: str,
    grain: str,
    keys: Sequence[str],
    has_null: bool,
    max_runs: int = MAX_EXACT_RANGES,
) -> PartitionRanges:
    """Rows of day or month partitions `keys` (ISO dates) as ranges of the raw `column` they come
    from, the partition being `column`'s day or month: `column >= first AND column < after_last`
    per run of consecutive partitions (and `column IS NULL` for the NULL partition). Every
    partition of a run is in `keys`, so a row is in a range exactly when its partition is in
    `keys`. Past `max_runs` runs it is one span from the first to the last partition, which
    only lets DuckDB skip the row groups outside it: the caller matches the keys as well."""
    runs = partition_runs(grain, keys)
    is_exact = len(runs) <= max_runs
    if not is_exact:
        runs = [(runs[0][0], runs[-1][1])]

    def bound(day: date) -> exp.Expr:
        return _typed(day.isoformat(), type_name)

    ranges: list[exp.Expr] = [
        exp.and_(
            exp.GTE(this=column.copy(), expression=bound(first)),
            exp.LT(this=column.copy(), expression=bound(after)),
            copy=False,
        )
        for first, after in runs
    ]
    if has_null:
        ranges.append(exp.Is(this=column.copy(), expression=exp.null()))
    if not ranges:  # only the NULL partition asked and none: no row is in it
        return PartitionRanges(exp.false(), is_exact=True)
    return PartitionRanges(exp.or_(*ranges, copy=False), is_exact)


# Integer types a key block's span is written in, with their least and greatest values.
_INTEGER_BOUNDS = {
    "TINYINT": (-(1 << 7), (1 << 7) - 1),
    "SMALLINT": (-(1 << 15), (1 << 15) - 1),
    "INTEGER": (-(1 << 31), (1 << 31) - 1),
    "BIGINT": (-(1 << 63), (1 << 63) - 1),
    "UTINYINT": (0, (1 << 8) - 1),
    "USMALLINT": (0, (1 << 16) - 1),
    "UINTEGER": (0, (1 << 32) - 1),
    "UBIGINT": (0, (1 << 64) - 1),
}
# Key blocks are matched within at most this many spans of the raw key: over 9.5M rows written in
# key order, 16 spans around 5,900 scattered blocks read 6% of the row groups.
MAX_BLOCK_SPANS = 16


def block_spans(column: exp.Expr, type_name: str | None, blocks: Sequence[int]) -> exp.Expr | None:
    """A predicate on the raw integer `column` that every row of key blocks `blocks` meets (a few
    spans of its values, runs of blocks merged across the smallest gaps): beside the match on the
    blocks, it lets the scan skip the row groups outside them. None: `type_name` is not an integer
    type, or no block is asked. A block is `column // KEY_BLOCK`, which truncates towards zero:
    block 0 holds -63..63, block -1 -127..-64."""
    limits = _INTEGER_BOUNDS.get(type_name or "")
    if limits is None or not blocks:
        return None
    spans: list[exp.Expr] = []
    for first, last in _merged_runs(blocks):
        low = first * KEY_BLOCK - (KEY_BLOCK - 1 if first <= 0 else 0)
        high = last * KEY_BLOCK + (KEY_BLOCK - 1 if last >= 0 else 0)
        low, high = max(low, limits[0]), min(high, limits[1])
        if low > high:
            continue  # no value of the type falls in these blocks
        spans.append(
            exp.Between(
                this=column.copy(),
                low=_typed(str(low), type_name or ""),
                high=_typed(str(high), type_name or ""),
            )
        )
    return exp.or_(*spans, copy=False) if spans else exp.false()


def _merged_runs(blocks: Sequence[int]) -> list[tuple[int, int]]:
    """The blocks as at most MAX_BLOCK_SPANS runs (first, last), merged across the smallest gaps
    (the first of equal gaps first). Merging two runs changes no other gap, so the gaps kept are
    the largest: one sort, not a search per merge (thousands of scattered blocks)."""
    runs: list[list[int]] = []
    for block in sorted(set(blocks)):
        if runs and block == runs[-1][1] + 1:
            runs[-1][1] = block
        else:
            runs.append([block, block])
    gaps = sorted(range(len(runs) - 1), key=lambda index: (runs[index + 1][0] - runs[index][1], index))
    kept = gaps[max(len(runs) - MAX_BLOCK_SPANS, 0) :]
    merged: list[tuple[int, int]] = []
    start = 0
    for gap in sorted(kept):
        merged.append((runs[start][0], runs[gap][1]))
        start = gap + 1
    if runs:
        merged.append((runs[start][0], runs[-1][1]))
    return merged


def _not_replaced(
    query_alias: str,
    keys: Sequence[str],
    keys_tables: Sequence[str],
    grain: str | None,
    is_null_free: bool = False,
) -> exp.Expr:
    """NOT EXISTS a later key equal (NULL-safe) to this row's: an anti-join, never NOT IN.

    `is_null_free` (the keys tables hold no NULL key) with one key: `NOT COALESCE(value IN
    (keys), FALSE)`, which reads the keys once where the NULL-safe form reads them twice (with
    eight segments, half the composite's tree and about half of DuckDB's planning of it). A NULL
    value meets no key there, as NULL-safe equality would have it, so the row is kept."""
    values = [partition_key(exp.column(key, table=query_alias), grain) for key in keys]
    source = _keys_of(keys, keys_tables)
    if is_null_free and len(keys) == 1:
        column = exp.column(keys[0], table=KEYS_ALIAS)
        matched = exp.In(
            this=values[0], query=exp.Subquery(this=exp.select(column).from_(source.subquery(KEYS_ALIAS)))
        )
        return exp.not_(exp.func("coalesce", matched, exp.false()))
    return exp.not_(keyed_rows(keys, values, source=source))


def _keys_of(keys: Sequence[str], keys_tables: Sequence[str]) -> exp.Query:
    """Every row's `keys` of the keys tables, one after the other (UNION ALL)."""
    parts = [
        exp.select(*(exp.column(key) for key in keys)).from_(snapshot_table(name)) for name in keys_tables
    ]
    return union_all(parts)


def merged_keys_query(keys: Sequence[str], keys_tables: Sequence[str]) -> exp.Query:
    """The distinct keys of the keys tables: what a segment merging theirs replaces."""
    return exp.select("*").distinct().from_(_keys_of(keys, keys_tables).subquery("__merged"))


def union_all(parts: Sequence[exp.Query], *, by_name: bool = False) -> exp.Query:
    """`parts` one after the other (UNION ALL, left-deep), taking them as they are: each is built
    for this union alone. (sqlglot copies both sides of every `union` by default, which made a
    state of many segments cost time quadratic in its segments to build.)"""
    if len(parts) == 1:
        return parts[0]
    return exp.union(*parts, distinct=False, by_name=by_name, copy=False)  # type: ignore[call-arg]  # sqlglot hands its options to each Union


def composite_query(
    segments: Sequence[Segment], merge_keys: Sequence[str] = (), grain: str | None = None
) -> exp.Query:
    """The rows a list of segments stands for (what the live view selects). With a `grain`, the
    keys are partitions: a later segment replaces whole partitions of the earlier ones. A new tree
    for the caller, copied from the one built the first time (segments never change): each part
    anti-joins the keys of every later segment, a tree growing with the square of the segments
    (eight segments: 29 ms to build, 8 ms to copy, asked for some thirty times a run)."""
    return _composite(tuple(segments), tuple(merge_keys), grain).copy()


@functools.lru_cache(maxsize=256)
def _composite(segments: tuple[Segment, ...], merge_keys: tuple[str, ...], grain: str | None) -> exp.Query:
    parts: list[exp.Query] = []
    for index, segment in enumerate(segments):
        source = snapshot_table(segment.table)
        source.set("alias", exp.TableAlias(this=exp.to_identifier("__seg")))
        part = exp.select("*").from_(source, copy=False)
        later = [later for later in segments[index + 1 :] if later.keys_table]
        if later and merge_keys:
            later_keys = [segment.keys_table for segment in later if segment.keys_table]
            is_null_free = all(segment.is_null_free for segment in later)
            part = part.where(_not_replaced("__seg", merge_keys, later_keys, grain, is_null_free), copy=False)
        parts.append(part)
    return union_all(parts, by_name=True)


def replaced_rows(
    segments: Sequence[Segment],
    merge_keys: Sequence[str],
    grain: str | None,
    keys_tables: Sequence[str],
    *,
    is_null_free: bool,
    exact: exp.Expr | None = None,
    key_range: KeyRange | None = None,
    within: exp.Expr | None = None,
) -> exp.Query:
    """The rows of the state `segments` stand for whose keys (partitions, with a `grain`) the keys
    tables hold: what a new segment with those keys replaces. `exact`, a predicate on the columns
    that holds for exactly those rows (partition ranges), replaces the key match; `key_range`, the
    keys' range, is added to it (keyed_rows); `within`, a predicate every one of those rows meets
    (block_spans over `__before`), is added before the match."""
    keys = list(merge_keys)
    before = composite_query(segments, keys, grain).subquery("__before")
    if exact is not None:
        return exp.select("*").from_(before).where(exact)
    values = [partition_key(exp.column(key, table="__before"), grain) for key in keys]
    matched = keyed_rows(
        keys,
        values,
        source=_keys_of(keys, keys_tables),
        is_null_free_filter=is_null_free,
        key_range=key_range,
    )
    if within is not None:
        matched = exp.and_(within, matched, copy=False)
    return exp.select("*").from_(before).where(matched)


def replaced_rows_key(
    segments: Sequence[Segment], merge_keys: Sequence[str], grain: str | None, keys_tables: Sequence[str]
) -> tuple[object, ...]:
    """What `replaced_rows` depends on (segments and keys tables are immutable once published)."""
    return ("replaced", tuple(segments), tuple(merge_keys), grain, tuple(keys_tables))


def composite_tables(segments: Sequence[Segment], merge_keys: Sequence[str] = ()) -> tuple[str, ...]:
    """Every snapshot-schema table the composite query reads, sorted (what its view should read)."""
    names = {segment.table for segment in segments}
    if merge_keys:
        names.update(segment.keys_table for segment in segments[1:] if segment.keys_table)
    return tuple(sorted(names))


@dataclass(frozen=True)
class WindowStats:
    high: str | None  # MAX(cdc) as text (None: no row has a value)
    cdc_type: str
    window_rows: int | None  # rows in (low, high] (None: no low, a first build)
    old_count: int  # rows outside the window (at or below low, or NULL)
    old_hash_sum: str | None  # None when the figures are not row-hash sums (a change-column basis)
    next_count: int  # rows at or below `next_threshold` (high - lateness), for the next build
    next_hash_sum: str | None


def _typed(text: str, type_name: str) -> exp.Expr:
    return exp.Cast(this=exp.Literal.string(text), to=data_type(type_name))


def window_predicate(cdc: exp.Expr, low: exp.Expr | None, high: exp.Expr) -> exp.Expr:
    """(low, high] on the cdc expression; rows whose cdc is NULL are never in a window."""
    upper = exp.LTE(this=cdc.copy(), expression=high.copy())
    if low is None:
        return upper
    return exp.and_(exp.GT(this=cdc.copy(), expression=low.copy()), upper)


def typed_literal(text: str, type_name: str) -> exp.Expr:
    return _typed(text, type_name)


@dataclass(frozen=True)
class TypedTexts:
    """Values of one type as the texts a cast reads (None: NULL). Thousands of partition keys go
    to a values table this way, without a tree built per key and taken apart again."""

    type_name: str
    texts: tuple[str | None, ...]

    def literals(self) -> list[exp.Expr]:
        return [exp.null() if text is None else _typed(text, self.type_name) for text in self.texts]


REREAD_ALIAS = "__reread"


def keys_query(
    relation: exp.Table | exp.Query,
    keys: Sequence[tuple[str, exp.Expr]],
    window: exp.Expr,
    deleted_from: exp.Query | None,
    merge_keys: Sequence[str],
    reread: tuple[exp.Query, exp.Expr] | None = None,
) -> exp.Query:
    """What create_keys_table writes: the distinct keys, one column per key name."""
    changed = (
        exp.select(*(expression.copy().as_(key) for key, expression in keys))
        .from_(as_rows(relation))
        .where(window.copy())
    )
    query: exp.Query = changed
    if reread is not None:
        state, condition = reread
        band = (
            exp.select(*(exp.column(key, table=REREAD_ALIAS) for key in merge_keys))
            .from_(state.subquery(REREAD_ALIAS))
            .where(condition.copy())
        )
        query = exp.union(query, band, distinct=False)
    if deleted_from is not None:
        present = exp.select(*(expression.copy().as_(key) for key, expression in keys)).from_(
            as_rows(relation)
        )
        gone = (
            exp.select(*(exp.column(key, table="__prev") for key in merge_keys))
            .from_(deleted_from.subquery("__prev"))
            .where(
                exp.not_(
                    exp.Exists(
                        this=exp.select(exp.Literal.number(1))
                        .from_(present.subquery("__now"))
                        .where(_null_safe_match(merge_keys, "__now", "__prev"))
                    )
                )
            )
        )
        query = exp.union(query, gone, distinct=False)
    return exp.select("*").distinct().from_(query.subquery("__changed"))


@dataclass(frozen=True)
class KeyRange:
    """The least and the greatest key of a one-column keys table (typed literals)."""

    low: exp.Expr
    high: exp.Expr


def keyed_rows(
    keys: Sequence[str],
    values: Sequence[exp.Expr],
    *,
    keys_table: str | None = None,
    source: exp.Query | None = None,
    is_null_free_filter: bool = False,
    key_range: KeyRange | None = None,
) -> exp.Expr:
    """Whether a row of `keys_table` (or `source`) has `keys` equal to `values`, NULL-safe: a
    semi-join. Never NULL itself, so `NOT keyed_rows(...)` is a sound anti-join (never NOT IN).

    `is_null_free_filter`: the keys hold no NULL and the result is only used as a filter (never
    negated): then a plain `IN (subquery)`, which lets DuckDB prune the scan with the keys' range.
    `key_range` (with `is_null_free_filter` and one key): the keys' range as literals beside the
    `IN`, which every matching row meets, for a backend that does not derive it from the join
    (Spark): its Parquet reader then skips the row groups outside it."""
    if keys_table is not None:
        relation: exp.Expr = snapshot_table(keys_table).as_(KEYS_ALIAS)
    elif source is not None:
        relation = source.subquery(KEYS_ALIAS)
    else:
        raise ValueError("keyed_rows needs a keys table or a source query")
    if len(keys) == 1:
        # `IN (subquery)` plans as a hash semi-join on the few keys; a correlated EXISTS with
        # IS NOT DISTINCT FROM plans as a join over every distinct value of the row side.
        key = exp.column(keys[0], table=KEYS_ALIAS)
        value = values[0]
        if is_null_free_filter:
            matching = exp.In(this=value.copy(), query=exp.Subquery(this=exp.select(key).from_(relation)))
            if key_range is None:
                return matching
            within = exp.Between(this=value.copy(), low=key_range.low.copy(), high=key_range.high.copy())
            return exp.and_(within, matching, copy=False)
        present = (
            exp.select(key.copy())
            .from_(relation.copy())
            .where(exp.not_(exp.Is(this=key.copy(), expression=exp.null())))
        )
        some_null = exp.Exists(
            this=exp.select(exp.Literal.number(1))
            .from_(relation.copy())
            .where(exp.Is(this=key.copy(), expression=exp.null()))
        )
        matched = exp.func(
            "coalesce", exp.In(this=value.copy(), query=exp.Subquery(this=present)), exp.false()
        )
        return exp.paren(
            exp.or_(matched, exp.and_(exp.Is(this=value.copy(), expression=exp.null()), some_null)),
            copy=False,
        )
    match = exp.and_(
        *(
            exp.NullSafeEQ(this=exp.column(key, table=KEYS_ALIAS), expression=value.copy())
            for key, value in zip(keys, values, strict=True)
        )
    )
    return exp.Exists(this=exp.select(exp.Literal.number(1)).from_(relation).where(match))


def key_extremes(key: exp.Expr) -> list[exp.Expr]:
    """The least and the greatest `key` as text, and the type of the least (sql.key_bounds)."""
    least = exp.func("min", key.copy())
    return [
        exp.cast(least.copy(), "VARCHAR"),
        exp.cast(exp.func("max", key.copy()), "VARCHAR"),
        exp.func("typeof", least),
    ]
