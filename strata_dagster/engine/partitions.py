"""Partition-complete builds for models with `partitioned_by` (seed 003).

Affected partitions are found from what changed in the raw `from` input: its rows are grouped by
the partition of the model's partition column traced back to them (before any filter), and each
group's row-hash fingerprint is compared with the one recorded by the previous build. Every
affected partition is recomputed completely, from all of its input rows, into a new immutable
segment that replaces those partitions (and only those) in the model's view. A month model over
daily rows recomputes whole months. Anything that makes a partition depend on rows of other
partitions (window functions, set operations) or on another input that changed rebuilds fully.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.incremental import DeltaBuild, DeltaBuilder, Fallback, IncrementalContext
from strata_dagster.language.definition import Model
from strata_dagster.warehouse.content import ROW_ALIAS
from strata_dagster.warehouse.history import SnapshotRecord
from strata_dagster.warehouse.segments import (
    RANGE_TYPES,
    Segment,
    keyed_rows,
    partition_key,
    partition_ranges,
    typed_literal,
)
from strata_dagster.warehouse.session import WarehouseError

STRATEGY = "partitions"
NULL_PARTITION = "\x00null"


def partition_column(ctx: IncrementalContext | Model) -> str:
    model = ctx if isinstance(ctx, Model) else ctx.model
    spec = model.properties.partitioned_by
    assert spec is not None
    return spec.column


def partition_grain(ctx: IncrementalContext | Model) -> str:
    model = ctx if isinstance(ctx, Model) else ctx.model
    spec = model.properties.partitioned_by
    assert spec is not None
    return spec.grain


def locality_problem_of(model: Model, compiled: CompiledModel) -> str | None:
    """Why partitions of this model cannot be rebuilt one by one, if they cannot."""
    if compiled.has_window:
        return "a window function can read rows of other partitions"
    if compiled.has_set_operation:
        return "a set operation brings rows the partition column does not trace to `from`"
    if compiled.traced_column(partition_column(model)) is None:
        return (
            f"partition column `{partition_column(model)}` is not carried unchanged from `{compiled.base_relation}` "
            "(a plain column or let, through joins and group keys)"
        )
    return None


def locality_problem(ctx: IncrementalContext) -> str | None:
    return locality_problem_of(ctx.model, ctx.compiled)


def raw_partition_of(model: Model, compiled: CompiledModel, qualifier: str | None = None) -> exp.Expression:
    """The partition of a raw `from` row, by the model's grain."""
    base = compiled.traced_column(partition_column(model))
    assert base is not None
    return partition_key(compiled.base_expression(base, qualifier=qualifier), partition_grain(model))


def raw_partition(ctx: IncrementalContext, qualifier: str | None = None) -> exp.Expression:
    return raw_partition_of(ctx.model, ctx.compiled, qualifier)


def partition_fingerprints(ctx: IncrementalContext) -> dict[str, list[Any]]:
    """Row count and row-hash sum of the raw `from` input, per partition (before any filter);
    taken from the run's source scan when it grouped the source by this partition already."""
    groups = ctx.partition_groups
    if groups is None:
        groups = ctx.session.content_by_group(
            ctx.relation(ctx.compiled.base_relation), raw_partition(ctx), ctx.base_basis
        )
    return {
        NULL_PARTITION if key is None else key: [count, hash_sum] for key, (count, hash_sum) in groups.items()
    }


def other_inputs(ctx: IncrementalContext, identities: dict[str, str]) -> dict[str, str]:
    return {name: identity for name, identity in identities.items() if name != ctx.compiled.base_relation}


def full_detail(ctx: IncrementalContext, identities: dict[str, str]) -> dict[str, Any]:
    """What a full build of a partitioned model records for its next, partition-complete build."""
    detail: dict[str, Any] = {
        "strategy": STRATEGY,
        "merge_keys": [partition_column(ctx)],
        "partition_grain": partition_grain(ctx),
        "other_inputs": other_inputs(ctx, identities),
    }
    if locality_problem(ctx) is None:
        detail["partition_fingerprints"] = partition_fingerprints(ctx)
    return detail


class PartitionBuilder(DeltaBuilder):
    def __init__(
        self,
        ctx: IncrementalContext,
        previous: SnapshotRecord,
        segments: list[Segment],
        identities: dict[str, str],
    ) -> None:
        super().__init__(ctx, previous, segments)
        self.identities = identities

    def build(self) -> DeltaBuild | Fallback:
        previous = self.previous.detail
        if self.previous.model_fingerprint != self.ctx.fingerprint:
            return Fallback("the model's code changed since its last build")
        if previous.get("strategy") != STRATEGY or previous.get("partition_grain") != partition_grain(
            self.ctx
        ):
            return Fallback("the previous state was not built by partitions of this grain")
        problem = locality_problem(self.ctx)
        if problem is not None:
            return Fallback(problem)
        changed_inputs = sorted(
            name
            for name, identity in other_inputs(self.ctx, self.identities).items()
            if previous.get("other_inputs", {}).get(name) != identity
        )
        if changed_inputs:
            return Fallback(f"`{changed_inputs[0]}` changed, and every partition reads it")
        if "partition_fingerprints" not in previous:
            return Fallback("the previous build recorded no partition fingerprints")
        now = partition_fingerprints(self.ctx)
        before = previous["partition_fingerprints"]
        affected = self.affected(now, before)
        facts = {
            "partition_fingerprints": self.recorded_fingerprints(now, before),
            "other_inputs": other_inputs(self.ctx, self.identities),
        }
        detail: dict[str, Any] = {"partitions": affected, "partitions_total": len(now)}
        if not affected:
            return DeltaBuild(self.previous, True, detail)
        column = partition_column(self.ctx)
        keys_table = f"{self.ctx.table_name}__partitions"
        self.ctx.session.create_values_table(keys_table, column, [self._literal(key) for key in affected])
        alias = self.ctx.compiled.base_relation
        predicate = keyed_rows(
            [column],
            [raw_partition(self.ctx, qualifier=alias)],
            keys_table=keys_table,
            is_null_free_filter=NULL_PARTITION not in affected,
        )
        pruning = self._ranges(affected, alias)
        if pruning is not None:
            predicate = exp.and_(pruning, predicate, copy=False)
        delta_query = self.ctx.compiled.with_base_predicate(predicate)
        grain = partition_grain(self.ctx)
        previous_keys = [partition_key(exp.column(column, table=ROW_ALIAS), grain)]
        removed = self.ctx.session.content_where(
            self.previous_query,
            keyed_rows(
                [column],
                previous_keys,
                keys_table=keys_table,
                is_null_free_filter=NULL_PARTITION not in affected,
            ),
        )
        return self._finish(delta_query, removed, keys_table, detail, facts)

    def affected(self, now: dict[str, Any], before: dict[str, Any]) -> list[str]:
        """The partitions to recompute: those whose input rows changed since the last build."""
        return sorted(key for key in set(now) | set(before) if now.get(key) != before.get(key))

    def recorded_fingerprints(self, now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
        """The input fingerprints the new state records for its next build to compare with."""
        return now

    def _ranges(self, affected: list[str], alias: str) -> exp.Expression | None:
        """The affected day or month partitions as ranges of the raw column they are cut from, when
        the partition expression is that column (or its cast to DATE or TIMESTAMP) and the column
        is a DATE or TIMESTAMP: then row groups outside every range are never read."""
        grain = partition_grain(self.ctx)
        compiled = self.ctx.compiled
        base = compiled.traced_column(partition_column(self.ctx))
        if grain not in ("day", "month") or base is None:
            return None
        raw = compiled.base_expression(base, qualifier=alias)
        if isinstance(raw, exp.Cast) and raw.to.this in (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP):
            raw = raw.this
        if not isinstance(raw, exp.Column):
            return None
        try:
            types = dict(self.ctx.session.describe(self.ctx.relation(compiled.base_relation)))
        except WarehouseError:
            return None
        type_name = types.get(raw.name)
        if type_name not in RANGE_TYPES:
            return None
        keys = [key for key in affected if key != NULL_PARTITION]
        return partition_ranges(raw, type_name, grain, keys, NULL_PARTITION in affected)

    def _literal(self, key: str) -> exp.Expression:
        if key == NULL_PARTITION:
            return exp.null()
        grain = partition_grain(self.ctx)
        if grain in ("day", "month"):
            return typed_literal(key, "DATE")
        types = dict(tuple(column) for column in self.previous.detail.get("columns") or ())
        return typed_literal(key, types.get(partition_column(self.ctx), "VARCHAR"))
