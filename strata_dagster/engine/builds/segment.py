"""A delta's new segment written over the previous state: measured, cut off, checked, recorded.

Every segment-writing build (a window's delta, partitions, slices, a model's appended rows) finds
its rows its own way and hands them to one `SegmentWriter`, which writes them as a segment of the
new state, keeps the previous state when no row changed (early cutoff), refuses a segment whose
columns differ (SchemaChanged), compacts the state when its segments pile up
(engine.builds.segment_compaction) and makes the new state's record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from strata_dagster.backends.choice import backend_version
from strata_dagster.engine.builds import segment_compaction
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.fingerprint import digest
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES
from strata_dagster.sql.content import Content
from strata_dagster.sql.key_bounds import KeyBounds
from strata_dagster.sql.render import render, snapshot_table
from strata_dagster.sql.segments import Segment
from strata_dagster.state.history import KEPT_FACTS, KEPT_WATERMARK, MOVING_FACTS, SnapshotRecord
from strata_dagster.state.states import KEYS_NULL_FREE

KEY_SUM = "key_cdc_sum"  # row count and sum of hash(merge keys, cdc column) over an upsert's state
KEY_BOUNDS = "merge_key_bounds"  # least and greatest merge key an upsert's state can hold (Spark)
# A model computed in full before its window (its cdc column cannot be traced to the source): how
# many of its rows lie at or below the next build's low, for that build to see rows appear there.
OUTPUT_NEXT_COUNT = "output_next_count"
# The input figures a state records: its inputs' partition fingerprints, key buckets, identities
# and joined figures. An early cutoff keeps the MOVING_FACTS of them and leaves the others to builds.
INPUT_FIGURES = (
    "partition_fingerprints",
    "key_bucket_figures",  # engine.builds.key_bucket_figures.BUCKET_FIGURES
    "other_inputs",
    "join_figures",
    "upstream_segments",
)
# What a new state records for the next build to check the input against.
FACTS_CARRIED = (
    "source_relation",
    "cdc_type",
    "next_count",
    "next_hash_sum",
    "row_basis",
    *INPUT_FIGURES,
    OUTPUT_NEXT_COUNT,
    "log_relation",  # engine.sources.logs: what a build over a ledger or change feed read
    "log_next_count",
)
# What a window's early cutoff keeps of FACTS_CARRIED beside its end (state.history.KEPT_WATERMARK).
WINDOW_CARRIED = tuple(key for key in FACTS_CARRIED if key not in INPUT_FIGURES)


@dataclass(frozen=True)
class DeltaBuild:
    """What a delta build left: the new state's record (or the previous one, kept), and the
    detail of the run's outcome."""

    record: SnapshotRecord
    is_unchanged: bool  # no row entered or left: the previous state stays
    detail: dict[str, Any] = field(default_factory=dict)


class SchemaChanged(Exception):
    """The delta's columns differ from the previous state's: only a full build is sound."""


def content_hash(columns: list[list[str]] | tuple[tuple[str, str], ...], count: int, hash_sum: str) -> str:
    """The same identity warehouse.content.Content.fingerprint gives a table with these rows."""
    return digest("content", backend_version(), tuple(tuple(column) for column in columns), count, hash_sum)


@dataclass(frozen=True)
class SegmentWriter:
    """Writes one build's segment over the previous state `previous` (made of `segments`).

    Args:
        previous: the live state the new segment goes over.
        segments: its segments, oldest first.
        merge_keys: the keys by which the new segment's keys table replaces earlier rows.
        key_columns: an upsert's merge keys and cdc column when its state records their figures
            (KEY_SUM), else None.
        state_bounds: the least and greatest merge key the previous state can hold, if recorded.
        measure: the new segment's content, when the build measures more in the same scan (a
            partition build's figures per partition); None: one content scan.

    Examples:
        An upsert's delta: `writer.write(ctx, rows_in_window, removed, keys_table, detail, facts)`
        gives the new state, or the previous one kept when the window's rows equal those they
        replace; a partition build passes its affected partitions' rows and keys table the same way.
    """

    previous: SnapshotRecord
    segments: list[Segment]
    merge_keys: list[str]
    key_columns: list[str] | None
    state_bounds: KeyBounds | None
    measure: Callable[[str], Content] | None = None

    def write(
        self,
        ctx: IncrementalContext,
        delta_query: exp.Query,
        removed: tuple[int, str],
        keys_table: str | None,
        detail: dict[str, Any],
        facts: dict[str, Any],
        kept_key_sum: tuple[int, int] | None = None,
        *,
        rows_left_below: bool = False,
    ) -> DeltaBuild:
        """Write `delta_query`'s rows as the new state's segment.

        Args:
            ctx: the build's context (its relations bind the query; its table receives the rows).
            delta_query: the segment's rows.
            removed: count and row-hash sum of the previous rows the segment replaces.
            keys_table: the table naming the keys (or partitions) the segment replaces, if any.
            detail: the outcome's detail so far; completed here.
            facts: what the new state records for the next build (FACTS_CARRIED).
            kept_key_sum: an upsert's key-and-cdc figures of the rows it keeps, to record KEY_SUM.
            rows_left_below: rows left the region at or below the watermark: a new state is
                recorded even when no row changes (its count no longer describes the source).

        Returns:
            DeltaBuild: the new state's record, or the previous state kept (`is_unchanged`) when
            the segment is empty or gives back exactly the rows it replaces.

        Raises:
            SchemaChanged: the segment's columns differ from the previous state's (its tables dropped).
        """
        session = ctx.session
        previous = self.previous
        name = ctx.table_name
        bound = bind_relations(delta_query, ctx.relation)
        segment_sql = render(bound)  # before create_snapshot consumes the tree
        session.create_snapshot(name, bound)
        detail.update(self._widened_bounds(ctx, keys_table))  # before the keys table may be dropped
        segment_key_sum: tuple[int, str] | None = None
        if kept_key_sum is not None and self.key_columns is not None:
            # The segment's content and key-and-cdc figures, in one scan of it.
            segment, segment_key_sum = session.content_and_key_sum(snapshot_table(name), self.key_columns)
        elif self.measure is not None:
            segment = self.measure(name)
        else:
            segment = session.content(snapshot_table(name))
        # A merge delta that gives back exactly the rows it replaces (e.g. a `lateness` re-read of
        # unchanged rows) leaves the state's rows as they are, so the state stays (early cutoff).
        # Partition builds keep their own rule (engine.builds.partitions).
        is_same_rows = (segment.row_count, int(segment.row_hash_sum)) == (removed[0], int(removed[1]))
        is_cutoff = (segment.row_count == 0 and removed[0] == 0) or (
            is_same_rows and ctx.model.properties.merge_strategy in INCREMENTAL_STRATEGIES
        )
        if is_cutoff and not rows_left_below:
            session.drop_snapshot(name)
            if keys_table:
                session.drop_snapshot(keys_table)
            detail.update(rows_merged=0)
            return self.kept(detail, facts)
        count = previous.row_count - removed[0] + segment.row_count
        hash_sum = str(int(previous.row_hash_sum) - int(removed[1]) + int(segment.row_hash_sum))
        columns = previous.detail.get("columns")
        if columns is not None and [list(column) for column in segment.columns] != columns:
            session.drop_snapshot(name)
            if keys_table:
                session.drop_snapshot(keys_table)
            raise SchemaChanged()
        if kept_key_sum is not None and segment_key_sum is not None:
            segment_count, segment_sum = segment_key_sum
            detail[KEY_SUM] = [kept_key_sum[0] + segment_count, str(kept_key_sum[1] + int(segment_sum))]
        if keys_table and removed[0] == 0:
            # No live row has a key of this delta (e.g. only new orders): nothing earlier to hide.
            session.drop_snapshot(keys_table)
            keys_table = None
        if keys_table:
            # Recorded for the composite query: keys with no NULL are anti-joined in one read.
            merge_keys = previous.detail.get("merge_keys") or ()
            detail[KEYS_NULL_FREE] = bool(merge_keys) and session.count_null_keys(keys_table, merge_keys) == 0
        segments = [*previous.segment_ids, ctx.snapshot_id]
        compaction = segment_compaction.decide(
            previous, self.segments, segment.row_count, removed[0], count, keys_table
        )
        if compaction is None:
            detail.update(segment_compaction.carried(previous, segment.row_count))
        else:
            compacted = segment_compaction.compact(
                session,
                compaction,
                previous,
                self.segments,
                Segment(name, keys_table, bool(detail.get(KEYS_NULL_FREE))),
                ctx.snapshot_id,
                count,
            )
            detail.update(compacted.detail)
            name, keys_table, segments = compacted.table_name, compacted.keys_table, compacted.segment_ids
        detail.update(
            rows_merged=segment.row_count,
            rows_replaced=removed[0],
            segment_rows=segment.row_count,
            segment_hash_sum=segment.row_hash_sum,
            segment_sql=segment_sql,
        )
        record_detail = {
            **{
                key: value
                for key, value in previous.detail.items()
                if key in ("strategy", "merge_keys", "columns", "partition_grain", "row_wise")
            },
            **{key: facts.get(key) for key in FACTS_CARRIED if key in facts},
            "segments": segments,
            "keys_table": keys_table,
            **detail,
        }
        record = SnapshotRecord(
            snapshot_id=ctx.snapshot_id,
            model=ctx.model.name,
            table_name=name,
            partition_key="",
            model_fingerprint=ctx.fingerprint,
            content_hash=content_hash(columns or [list(c) for c in segment.columns], count, hash_sum),
            row_count=count,
            watermark=facts.get("high") or previous.watermark,
            created_entry=ctx.entry,
            row_hash_sum=hash_sum,
            detail=record_detail,
        )
        return DeltaBuild(record, False, detail)

    def kept(self, detail: dict[str, Any], facts: dict[str, Any]) -> DeltaBuild:
        """The previous state stays (its rows are this build's rows), with the facts that moved.

        Returns:
            DeltaBuild: the previous state, `is_unchanged`; KEPT_FACTS in `detail` when a moving
            fact (input figures, the window's end) differs from what the state recorded.
        """
        has_moved = any(
            key in facts and _as_recorded(facts[key]) != _as_recorded(self.previous.detail.get(key))
            for key in MOVING_FACTS
        )
        window = _window_facts(facts)
        if window and _as_recorded(window[KEPT_WATERMARK]) != _as_recorded(self.previous.watermark):
            has_moved = True
        if has_moved:
            # Each cutoff keeps every moving fact it has, so the latest one alone is in effect.
            detail[KEPT_FACTS] = {**{key: facts[key] for key in MOVING_FACTS if key in facts}, **window}
        return DeltaBuild(self.previous, True, detail)

    def _widened_bounds(self, ctx: IncrementalContext, keys_table: str | None) -> dict[str, Any]:
        """The new state's key bounds: the previous state's and its new segment's, whose keys are
        among its keys table's."""
        bounds = None if keys_table is None else ctx.session.key_bounds(keys_table, self.merge_keys)
        widened = None if self.state_bounds is None or bounds is None else self.state_bounds.widened(bounds)
        return {} if widened is None else {KEY_BOUNDS: widened.as_detail()}


def _window_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """A window's end (KEPT_WATERMARK) and the facts the next build checks its input with, as a
    new state would record them; none for a build that read no window."""
    if facts.get("high") is None:
        return {}
    carried = {key: facts[key] for key in WINDOW_CARRIED if key in facts}
    return {KEPT_WATERMARK: facts["high"], **carried}


def _as_recorded(value: Any) -> str:
    """`value` as history stores it (JSON: tuples are lists, keys sorted)."""
    return json.dumps(value, sort_keys=True, default=str)


def bind_relations(query: exp.Query, relation: Callable[[str], exp.Table | exp.Query]) -> exp.Query:
    """`query` (a tree built for this build, no one else's) with its relations bound, in place."""
    from strata_dagster.compile.relations import bind

    return bind(query, relation, copy=False)  # type: ignore[return-value]  # bind keeps the root: a query
