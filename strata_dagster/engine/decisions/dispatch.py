"""Which strategy builds a rebuilt model, and which builder computes an incremental model's delta.

The one place a build is chosen. `strategy_for` turns a model's decision (engine.decisions) into
the strategy the run builds it with; `delta_builder` picks the delta's builder for `strata run`
(through `IncrementalBuild`) and for `strata plan`, which asks it what the delta would read (its
precheck, window, partitions or slices) without writing.

| decision's strategy | strategy | how the rows are found |
| --- | --- | --- |
| view | ViewBuild (builds/view.py) | a view over the inputs, no rows stored |
| sliding_window | WindowBuild (builds/window.py) | weighted delta of the window (engine.builds.sliding_window) |
| full | FullBuild (builds/full.py) | the whole query; an incremental model's first build or full reason |
| requested | IncrementalBuild + PartitionBuild(ByRequest) (engine.builds.partition_range) | exactly the partitions asked for |
| appended | IncrementalBuild + AppendedBuilder (engine.builds.model_slices) | the pipeline over the inputs' new rows |
| sliced | IncrementalBuild + PartitionBuild(ByUpstreamSegments[, AggregateMaintained]) | the slices the inputs' new segments reach |
| partitions | IncrementalBuild + PartitionBuild(ByPartitionFingerprints) (engine.builds.partitions) | partitions whose input fingerprints changed |
| partitions (bucket) | IncrementalBuild + KeyBucketBuild(ByKeyBuckets) (engine.builds.key_buckets) | key buckets whose source figures changed |
| delta | IncrementalBuild + DeltaBuilder (engine.builds.incremental) | a window (low, high] of an append or upsert |
| delta | IncrementalBuild + LogDeltaBuilder (engine.builds.incremental) | the window of a ledger's or change feed's log |
| delta | IncrementalBuild + TableHistoryBuilder (engine.builds.table_history) | a plain table's rows against a history's current versions |
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from strata_dagster.engine.builds import aggregate_delta
from strata_dagster.engine.builds.aggregate_builder import AggregateMaintained
from strata_dagster.engine.builds.aggregate_delta import AggregateShape
from strata_dagster.engine.builds.delta import IncrementalBuild
from strata_dagster.engine.builds.full import FullBuild, GroupedFor
from strata_dagster.engine.builds.incremental import DeltaBuilder, LogDeltaBuilder
from strata_dagster.engine.builds.key_buckets import ByKeyBuckets, KeyBucketBuild
from strata_dagster.engine.builds.model_slices import AppendedBuilder, ByUpstreamSegments, ModelSlices
from strata_dagster.engine.builds.partition_range import ByRequest
from strata_dagster.engine.builds.partitions import PartitionBuild, partition_grain
from strata_dagster.engine.builds.row_wise import NOT_ROW_WISE, ROW_WISE, RowWise
from strata_dagster.engine.builds.strategy import BuildStrategy, IncrementalContext, Target
from strata_dagster.engine.builds.table_history import TableHistoryBuilder
from strata_dagster.engine.builds.view import ViewBuild
from strata_dagster.engine.builds.window import WindowBuild
from strata_dagster.engine.decisions.definition import ModelDecision
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.paths import DELTA, PARTITIONS
from strata_dagster.sql.segments import KEY_GRAINS
from strata_dagster.state.history import SnapshotRecord

# Whether a state is there to keep or build on: every table of it present and whole (the decider's).
IsPresent = Callable[[SnapshotRecord | None], bool]


def strategy_for(
    decision: ModelDecision, scope: RunScope, target: Target, is_state_present: IsPresent
) -> BuildStrategy:
    """The strategy that builds a model the run rebuilds.

    Args:
        decision: the model's decision (not a reuse): its strategy name, live state, full reason.
        scope: what the run read (sources, states, partition groups, ...).
        target: the new snapshot the build writes.
        is_state_present: whether a state is there to keep (early cutoff) or build on.

    Returns:
        BuildStrategy: a `ViewBuild`, `WindowBuild`, `FullBuild` or `IncrementalBuild`, ready to
        `build()`.
    """
    name = decision.model
    current, existing = decision.live, decision.choice.existing
    session, relation = scope.session, scope.relations_for(name)
    if decision.strategy == "view":
        return ViewBuild(
            target,
            session,
            relation,
            current,
            existing,
            scope.chosen,
            scope.is_refreshed(name),
            is_state_present,
        )
    window = scope.sliding_source_of(name)
    if window is not None:
        return WindowBuild(
            target,
            session,
            relation,
            window,
            scope.business[window],
            current,
            scope.is_partitioned(name),
            scope.is_refreshed(name),
            scope.catalog.snapshot_tables,
            full_build(scope, target, current, None, None, is_state_present),
            name in scope.requested,
        )
    if not scope.is_incremental(name):
        maintained = scope.row_wise.get(name)
        return full_build(
            scope,
            target,
            current,
            existing,
            None,
            is_state_present,
            f"{NOT_ROW_WISE}: {maintained}" if isinstance(maintained, str) else None,
        )
    context = scope.incremental_context(name, target.snapshot_id, target.table_name)
    reason = decision.full_reason
    delta = None
    if current is not None and reason is None:
        # Narrowed now, as a business-versioned source's files are read before the delta's builder.
        delta = partial(delta_builder, scope, name, scope.narrowed(context, current), current)

    return IncrementalBuild(
        decision.strategy or "full",
        target,
        session,
        delta,
        reason,
        full_build(scope, target, current, existing, context, is_state_present),
        PARTITIONS if scope.is_partitioned(name) else DELTA,
        name in scope.requested,
        _row_wise(scope, name),
    )


def full_build(
    scope: RunScope,
    target: Target,
    current: SnapshotRecord | None,
    existing: SnapshotRecord | None,
    context: IncrementalContext | None,
    is_state_present: IsPresent,
    not_maintained: str | None = None,
) -> FullBuild:
    """A model's full build in this run; `context`: an incremental model's, whose new state records
    what its next delta needs."""
    name = target.model.name
    followed = scope.followed.get(name)
    is_incremental = context is not None
    row_wise = _row_wise(scope, name)
    return FullBuild(
        target,
        scope.session,
        scope.relations_for(name),
        current,
        existing,
        is_state_present,
        context,
        scope.replaced_sources(name) if is_incremental else (),
        scope.is_partitioned(name),
        scope.is_refreshed(name),
        followed,
        name in scope.row_wise,
        scope.identities(name) if is_incremental else {},
        scope.upstream_segments(name) if followed is not None and is_incremental else {},
        str(row_wise[ROW_WISE]) if row_wise else None,
        not_maintained,
        _grouped_for_reader(scope, name),
    )


def _grouped_for_reader(scope: RunScope, name: str) -> GroupedFor | None:
    """A model read as `from` by a partitioned model of this run: its full build counts and
    hashes its rows by that model's partitions (adding up to its content), and the partitioned
    model's build takes those figures instead of reading the same rows again."""
    reader = scope.partitioned_reader_of(name)
    if reader is None:
        return None
    reader_name, key = reader

    def take(groups: dict[str | None, tuple[int, str]]) -> None:
        scope.lazy_partition_groups[reader_name] = lambda: groups

    return key, take


def _row_wise(scope: RunScope, name: str) -> dict[str, object]:
    """What every build outcome of a row-wise model says: the slicing it is maintained by."""
    maintained = scope.row_wise.get(name)
    return {ROW_WISE: maintained.text} if isinstance(maintained, (RowWise, ModelSlices)) else {}


def delta_builder(
    scope: RunScope, name: str, context: IncrementalContext, current: SnapshotRecord
) -> DeltaBuilder | TableHistoryBuilder | AppendedBuilder | PartitionBuild | KeyBucketBuild:
    """How the delta of incremental model `name` is built on its live state `current`.

    Args:
        scope: what the run read.
        name: the model.
        context: its build's context (narrowed to the files a business-versioned source needs).
        current: its live state.

    Returns:
        DeltaBuilder | AppendedBuilder | PartitionBuild: a `PartitionBuild` of the partitions requested by name
        (`ByRequest`); for a model following its input models' segments, an `AppendedBuilder` (no
        slicing), a `PartitionBuild` of the slices their new segments reach (`ByUpstreamSegments`,
        its rows `AggregateMaintained` for a partitioned `group ... aggregate`), or one comparing
        fingerprints when the input's change is no list of segments; a `PartitionBuild` by
        fingerprints (`ByPartitionFingerprints`) for a partitioned model; else a `DeltaBuilder`
        (append, upsert, append_new over a window).
    """
    segments, identities = scope.segments(current), scope.identities(name)
    if name in scope.requested:
        return PartitionBuild(context, current, segments, identities, ByRequest(scope.requested[name]))
    followed = scope.followed.get(name)
    if followed is not None:
        changes = scope.upstream_changes(name, current)
        if followed.spec is None:
            return AppendedBuilder(context, current, segments, identities, changes)
        has_fingerprints = "partition_fingerprints" in current.detail
        if not (isinstance(changes, str) and has_fingerprints):
            shape = aggregate_delta.shape_of(context.model, context.compiled)
            rows = None
            if isinstance(shape, AggregateShape) and scope.model(name).properties.partitioned_by is not None:
                rows = AggregateMaintained(shape, changes)
            return PartitionBuild(context, current, segments, identities, ByUpstreamSegments(changes), rows)
        # The input's change is not a list of segments: its fingerprints per partition tell.
        return PartitionBuild(
            context, current, segments, identities, upstream_segments=scope.upstream_segments(name)
        )
    if scope.is_partitioned(name) and partition_grain(context) in KEY_GRAINS:
        return KeyBucketBuild(context, current, segments, identities, ByKeyBuckets())
    if scope.is_partitioned(name):
        return PartitionBuild(context, current, segments, identities)
    if context.log is not None:
        return LogDeltaBuilder(context, current, segments, context.log)
    if scope.is_table_history(name):
        return TableHistoryBuilder(context, current, segments, scope.history_at)
    return DeltaBuilder(context, current, segments)
