"""The partition build of an aggregate over a model, its partitions maintained from the input's delta.

engine.builds.aggregate_delta says how the rows are found; this is where a build of a partitioned
`group ... aggregate` model following its input's segments (engine.builds.model_slices) uses it: the
affected partitions whose every group the delta decides are written from their old rows and the
delta, the others recomputed from the input, and both go into the one new segment the partition
build writes, measures and checks as before (engine.builds.partitions). When the delta cannot be used (a
joined input changed, the input replaced whole partitions, the engine is not DuckDB, the previous
state's columns are not what the model gives now), every affected partition is recomputed.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sqlglot import exp

from strata_dagster.backends.base import WarehouseError
from strata_dagster.engine.builds import aggregate_delta
from strata_dagster.engine.builds.aggregate_delta import MAINTAINED, AggregateShape
from strata_dagster.engine.builds.model_slices import UpstreamChange, replaced_rows
from strata_dagster.engine.builds.partitions import (
    NULL_PARTITION,
    PartitionBuild,
    Recomputed,
    partition_column,
    partition_grain,
)
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.language.definition import JoinStep
from strata_dagster.sql.render import data_type
from strata_dagster.sql.segments import composite_query, keyed_rows, partition_key, union_all


class AggregateMaintained:
    """A `PartitionBuild`'s rows for a partitioned aggregate following its input's segments: the
    partitions whose every group the input's delta decides are kept from their old rows and the
    delta, the others recomputed (`Recomputed`).

    Args:
        shape: the model's `group ... aggregate` shape (engine.builds.aggregate_delta).
        changes: what the followed input gained since the live state was built.
    """

    def __init__(self, shape: AggregateShape, changes: list[UpstreamChange] | str) -> None:
        self.shape = shape
        self.changes = changes
        self._held: list[Hashable] = []
        self._tables: list[str] = []

    def release(self, build: PartitionBuild) -> None:
        for key in self._held:
            build.ctx.session.forget_held(key)
        for table in self._tables:
            build.ctx.session.drop_snapshot(table)
        self._held, self._tables = [], []

    def rows(
        self, build: PartitionBuild, affected: list[str], keys_table: str, detail: dict[str, Any]
    ) -> exp.Query:
        change = self._usable_change(build)
        rows = None if change is None else self._maintained(build, change, affected, keys_table, detail)
        return rows if rows is not None else Recomputed().rows(build, affected, keys_table, detail)

    def _usable_change(self, build: PartitionBuild) -> UpstreamChange | None:
        """The input's change, when its delta can maintain this model's partitions."""
        ctx = build.ctx
        if not ctx.session.capabilities.maintains_aggregates_from_delta:
            return None
        if isinstance(self.changes, str) or len(self.changes) != 1:
            return None
        change = self.changes[0]
        # Segments that replace whole partitions take away as many rows as a recomputation reads.
        if change.grain is not None or change.model != ctx.compiled.base_relation or build.changed_inputs():
            return None
        if partition_column(ctx) not in self.shape.key_names:
            return None
        columns = build.previous.detail.get("columns")
        if not columns or aggregate_delta.exactness_problem(self.shape, columns) is not None:
            return None
        try:
            # What a recomputation gives now, as DuckDB binds it: the new rows are cast to these.
            types = [list(column) for column in ctx.session.describe(ctx.compiled.bound(ctx.relation))]
        except WarehouseError:
            return None
        return change if types == [list(column) for column in columns] else None

    def _maintained(
        self,
        build: PartitionBuild,
        change: UpstreamChange,
        affected: list[str],
        keys_table: str,
        detail: dict[str, Any],
    ) -> exp.Query | None:
        ctx, shape = build.ctx, self.shape
        session = ctx.session
        removed = replaced_rows(session, change)
        added = composite_query(change.added, change.merge_keys, change.grain) if change.added else None
        changes = aggregate_delta.changed_rows(ctx.compiled, shape, ctx.relation, removed, added)
        delta = self._hold(build, "delta", lambda: aggregate_delta.delta_figures(shape, changes))
        old_rows = build.live_rows(keys_table, affected)
        column, grain = partition_column(ctx), partition_grain(ctx)
        partition = partition_key(aggregate_delta.group_key(shape, column), grain)
        in_affected = keyed_rows(
            [column], [partition], keys_table=keys_table, is_null_free_filter=NULL_PARTITION not in affected
        )
        found = (
            aggregate_delta.old_and_delta(old_rows, delta, shape)
            .select(exp.cast(partition.copy(), data_type("VARCHAR")), copy=False)
            .distinct()
            .where(exp.and_(in_affected.copy(), aggregate_delta.undecided(shape)), copy=False)
        )
        _, rows = session.read_rows(found)
        undecided = sorted(NULL_PARTITION if row[0] is None else str(row[0]) for row in rows)
        _, counted = session.read_rows(exp.select(exp.func("count", exp.Star())).from_(delta.copy()))
        detail[MAINTAINED] = {"groups": int(counted[0][0]), "partitions_recomputed": undecided}
        if len(undecided) == len(affected):
            return None
        distinct = {
            item.name: self._distinct_change(build, item, changes, affected, keys_table)
            for item in shape.distinct
        }
        new_rows: exp.Query = aggregate_delta.maintained_rows(
            shape,
            build.previous.detail["columns"],
            old_rows,
            delta,
            distinct,
            exp.and_(in_affected, self._not_in(build, partition, undecided)),
        )
        if undecided:
            recompute_table = f"{ctx.table_name}__recomputed"
            session.create_values_table(recompute_table, column, build.typed_keys(undecided))
            self._tables.append(recompute_table)
            recomputed = ctx.compiled.with_base_predicate(build.input_rows_of(undecided, recompute_table))
            new_rows = union_all(
                [
                    exp.select("*").from_(new_rows.subquery("__maintained")),
                    exp.select("*").from_(recomputed.subquery("__recomputed")),
                ],
                by_name=True,
            )
        return new_rows

    def _distinct_change(
        self,
        build: PartitionBuild,
        item: aggregate_delta.Aggregate,
        changes: exp.Query,
        affected: list[str],
        keys_table: str,
    ) -> exp.Query:
        ctx = build.ctx
        pairs = self._hold(
            build, f"pairs:{item.name}", lambda: aggregate_delta.distinct_pairs(self.shape, item, changes)
        )
        narrowing = build.input_rows_of(affected, keys_table)
        traced = aggregate_delta.traced_argument(ctx.compiled, item, _joined_columns(ctx))
        if traced is not None:
            # Only the rows of the values the delta touched can hold a touched pair.
            values = exp.select(exp.column(aggregate_delta.VALUE)).from_(pairs.copy())
            narrowing = exp.and_(narrowing, exp.In(this=traced, query=exp.Subquery(this=values)))
        rows_now = aggregate_delta.rows_before_grouping(ctx.compiled, self.shape, ctx.relation, narrowing)
        return aggregate_delta.distinct_change(self.shape, item, pairs, rows_now)

    def _hold(self, build: PartitionBuild, name: str, query: Any) -> exp.Table:
        key = ("aggregate_delta", build.ctx.snapshot_id, name)
        held = build.ctx.session.held_rows(key, query)
        self._held.append(key)
        assert isinstance(held, exp.Table)  # DuckDB holds rows in a temporary table
        return held

    def _not_in(self, build: PartitionBuild, partition: exp.Expr, undecided: list[str]) -> exp.Expr:
        """Whether `partition` is none of the `undecided` ones (NULL_PARTITION: the NULL one)."""
        literals = [build.literal(key) for key in undecided if key != NULL_PARTITION]
        outside: exp.Expr = exp.true()
        if literals:
            listed = exp.In(this=partition.copy(), expressions=literals)
            outside = exp.func("coalesce", exp.not_(listed), exp.true())
        if NULL_PARTITION in undecided:
            outside = exp.and_(outside, exp.not_(exp.Is(this=partition.copy(), expression=exp.null())))
        return outside


def _joined_columns(ctx: IncrementalContext) -> list[tuple[JoinStep, list[str]]]:
    found = []
    for step in ctx.model.steps:
        if isinstance(step, JoinStep):
            columns = [name for name, _ in ctx.session.describe(ctx.relation(step.relation))]
            found.append((step, columns))
    return found
