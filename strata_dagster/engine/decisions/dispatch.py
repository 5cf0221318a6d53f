"""Which builder builds a rebuilt incremental model's delta on its live state.

One function for `strata run` and `strata plan`: the run builds with it, the plan asks it what it
would read (its precheck, window, partitions or slices) without writing.
"""

from __future__ import annotations

from strata_dagster.engine import aggregate_delta
from strata_dagster.engine.aggregate_builder import AggregateDeltaBuilder
from strata_dagster.engine.aggregate_delta import AggregateShape
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.incremental import DeltaBuilder, IncrementalContext
from strata_dagster.engine.model_slices import AppendedBuilder, SlicedBuilder
from strata_dagster.engine.partition_range import PartitionRangeBuilder
from strata_dagster.engine.partitions import PartitionBuilder
from strata_dagster.state.history import SnapshotRecord


def delta_builder(
    scope: RunScope, name: str, context: IncrementalContext, current: SnapshotRecord
) -> DeltaBuilder:
    """How the delta of incremental model `name` is built on its live state `current`."""
    segments, identities = scope.segments(current), scope.identities(name)
    if name in scope.requested:
        return PartitionRangeBuilder(context, current, segments, identities, scope.requested[name])
    followed = scope.followed.get(name)
    if followed is not None:
        changes = scope.upstream_changes(name, current)
        if followed.spec is None:
            return AppendedBuilder(context, current, segments, identities, changes)
        has_fingerprints = "partition_fingerprints" in current.detail
        if not (isinstance(changes, str) and has_fingerprints):
            shape = aggregate_delta.shape_of(context.model, context.compiled)
            if isinstance(shape, AggregateShape) and scope.model(name).properties.partitioned_by is not None:
                return AggregateDeltaBuilder(context, current, segments, identities, changes, shape)
            return SlicedBuilder(context, current, segments, identities, changes)
        # The input's change is not a list of segments: its fingerprints per partition tell.
        compared = PartitionBuilder(context, current, segments, identities)
        compared.upstream_segments = scope.upstream_segments(name)
        return compared
    if scope.is_partitioned(name):
        return PartitionBuilder(context, current, segments, identities)
    return DeltaBuilder(context, current, segments)
