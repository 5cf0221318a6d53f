"""A `sliding_window(N)` source as a run reads it: its last N consumed partitions (docs/architecture.md, R8)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from strata_dagster.sql.segments import typed_literal

SLIDING_WINDOW = "sliding_window"


def windowed(
    reading: exp.Select, key: exp.Expr, key_type: str, consumed: Sequence[str], size: int
) -> exp.Select:
    """The source read as its last `size` consumed partitions (the frontier's bound kept)."""
    if len(consumed) <= size:
        return reading
    boundary = typed_literal(consumed[-size - 1], key_type)
    return reading.where(exp.GT(this=key.copy(), expression=boundary))


def partitions_relation(raw: exp.Expr, key: exp.Expr, key_type: str, keys: Sequence[str]) -> exp.Select:
    """The source's rows in these partitions only (hive folders are pruned by the predicate)."""
    query = exp.select("*").from_(raw.copy())
    if not keys:
        return query.where(exp.false())
    literals = [typed_literal(item, key_type) for item in keys]
    return query.where(exp.In(this=key.copy(), expressions=literals))
