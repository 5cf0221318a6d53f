"""Per-bucket figures of a keyed source: which buckets of its key hold rows that changed.

A row-wise model over a source with a key and no change column is sliced by `bucket(key)`, the
key's hash modulo `KEY_BUCKETS` (engine/builds/key_buckets.py). Each build records, in a figures table
beside its state, the row count and row-hash sum of the source's rows per bucket (before any
filter); the next build compares the source's figures now with them. A bucket differs exactly when
a row with a key in it was inserted, deleted or changed, so recomputing the differing buckets from
all of their rows gives the rows a full build gives. The key need not be unique: a bucket is
recomputed whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.engine.builds.state_figures import NULL_KEY
from strata_dagster.sql.content import RowBasis, as_rows, row_hash_aggregates
from strata_dagster.sql.render import render, snapshot_table

if TYPE_CHECKING:
    # Imported where a build uses them: a run's decisions read this module's analysis alone.
    from strata_dagster.engine.builds.strategy import IncrementalContext

BUCKET_FIGURES = "key_bucket_figures"  # detail key: the figures table a state's build recorded
BUCKET, ROWS, HASH_SUM = "__bucket", "__rows", "__hash_sum"
_BEFORE, _NOW = "__before", "__now"


def figures_table(ctx: IncrementalContext) -> str:
    return f"{ctx.table_name}__buckets"


def figures_of(relation: exp.Table | exp.Query, bucket: exp.Expr, basis: RowBasis) -> exp.Query:
    """The row count and row-hash sum of `relation`'s rows per bucket; `bucket`: a row's bucket.
    Their sums are the relation's own content figures (sql.content.row_hash_aggregates)."""
    count, hash_sum = row_hash_aggregates(basis)
    return (
        exp.select(bucket.copy().as_(BUCKET), count.as_(ROWS), hash_sum.as_(HASH_SUM))
        .from_(as_rows(relation))
        .group_by(exp.Literal.number(1))
    )


def figures_query(ctx: IncrementalContext, bucket: exp.Expr) -> exp.Query:
    """The source's row count and row-hash sum per bucket; `bucket`: a raw `from` row's bucket."""
    return figures_of(ctx.relation(ctx.compiled.base_relation), bucket, ctx.base_basis)


def current_figures(ctx: IncrementalContext, bucket: exp.Expr) -> exp.Table | exp.Query:
    """The source's figures per bucket now: the rows the run's read of the source held, when it
    grouped the source the same way (one scan for the source's fingerprint and these figures),
    else the figures query itself."""
    query = figures_query(ctx, bucket)
    held = ctx.held_source_figures
    if held is not None and held[0] == render(query):
        return held[1].copy()
    return query


def record(ctx: IncrementalContext, bucket: exp.Expr) -> str:
    """Write this build's figures table; returns its name (recorded under BUCKET_FIGURES)."""
    table = figures_table(ctx)
    figures = current_figures(ctx, bucket)
    query = figures if isinstance(figures, exp.Query) else exp.select("*").from_(figures)
    ctx.session.create_snapshot(table, query)
    return table


def changed_buckets(
    ctx: IncrementalContext, before: str, now: exp.Table | exp.Query
) -> tuple[list[str], int | None]:
    """The buckets whose figures differ between table `before` and `now` (a table, or the figures
    query read without writing), as text (NULL_KEY: the bucket of the NULL key), and how many
    buckets table `now` has (None: a query)."""
    match = exp.NullSafeEQ(this=exp.column(BUCKET, table=_BEFORE), expression=exp.column(BUCKET, table=_NOW))
    differs = exp.or_(
        *(
            exp.NullSafeNEQ(this=exp.column(figure, table=_BEFORE), expression=exp.column(figure, table=_NOW))
            for figure in (ROWS, HASH_SUM)
        )
    )
    now_relation = now.subquery(_NOW) if isinstance(now, exp.Query) else now.as_(_NOW)
    bucket = exp.func("coalesce", exp.column(BUCKET, table=_BEFORE), exp.column(BUCKET, table=_NOW))
    changed = (
        exp.select(exp.cast(bucket, "VARCHAR").as_(BUCKET))
        .from_(snapshot_table(before).as_(_BEFORE))
        .join(now_relation, on=match, join_type="full")
        .where(differs)
    )
    _, rows = ctx.session.read_rows(changed)
    buckets = sorted(NULL_KEY if row[0] is None else str(row[0]) for row in rows)
    if isinstance(now, exp.Query):
        return buckets, None
    _, totals = ctx.session.read_rows(exp.select(exp.Count(this=exp.Star())).from_(now.copy()))
    return buckets, int(totals[0][0])
