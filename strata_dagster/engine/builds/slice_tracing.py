"""Slice keys traced through expressions: an output computed from the slice column by a function
that keeps its day or month (`cast(ts as date)`, `date_trunc('month', ts)`) slices a row-wise
model like the column itself (engine/builds/row_wise.py).

`f(ts)` keeps grain g when g(f(ts)) = g(ts) for every value: a cast to DATE or TIMESTAMP and
`date_trunc('day', ts)` keep days and months; `date_trunc('month', ts)` keeps months only, so a
model carrying it is sliced by the months of the source's day partitions (each touched day
recomputes its whole month). Only a `let` is traced: its expression is known over the raw row.
"""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.language.definition import PartitionGrain

_DAY_TYPES = (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP)


def _kept_grains(value: exp.Expr, column: str) -> tuple[str, ...]:
    """The grains `value`, an expression over the raw row, keeps of `column` (none: not traced)."""
    if isinstance(value, exp.Column):
        return ("day", "month") if value.name == column and not value.table else ()
    if isinstance(value, exp.Cast) and value.to.this in _DAY_TYPES:
        return _kept_grains(value.this, column)
    if isinstance(value, (exp.DateTrunc, exp.TimestampTrunc)):
        unit = value.args.get("unit")
        unit_name = (unit.name if isinstance(unit, (exp.Var, exp.Literal)) else str(unit or "")).lower()
        inner = _kept_grains(value.this, column)
        if unit_name == "day":
            return inner
        if unit_name == "month":
            return tuple(grain for grain in inner if grain == "month")
    if (
        isinstance(value, exp.Anonymous)
        and value.name.lower() == "date_trunc"
        and len(value.expressions) == 2
    ):
        unit, inner_value = value.expressions
        inner = _kept_grains(inner_value, column)
        if isinstance(unit, exp.Literal) and unit.name.lower() == "day":
            return inner
        if isinstance(unit, exp.Literal) and unit.name.lower() == "month":
            return tuple(grain for grain in inner if grain == "month")
    return ()


def traced_slice(compiled: CompiledModel, column: str, grain: str) -> tuple[str, PartitionGrain] | None:
    """An output column computed by a `let` from raw column `column` keeping `grain` (or, for
    days, their months), and the grain it slices by; None when no output is so computed."""
    if grain not in ("day", "month"):
        return None
    lets = dict(compiled.lets)
    found: tuple[str, PartitionGrain] | None = None
    for output, base in compiled.lineage:
        if base not in lets:
            continue
        kept = _kept_grains(compiled.base_expression(base), column)
        if grain == "day" and "day" in kept:
            return output, "day"
        if grain == "month" and "month" in kept:
            return output, "month"
        if grain == "day" and "month" in kept and found is None:
            found = (output, "month")
    return found
