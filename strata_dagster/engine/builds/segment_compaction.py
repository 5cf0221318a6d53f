"""When and how a delta build compacts its state's segments (engine.builds.incremental).

Every read of a state (the rows its next delta replaces, the models following it, its pins, its
live view) scans every segment and anti-joins each against the keys of the later ones: a read
costs what the segments hold, not what the state stands for. A compaction is decided by what the
segments cost, not by their count alone, and writes no more than it must:

- a delta that replaces every live row is the whole new state by itself: it becomes the base as it
  is, nothing is copied (a day-partitioned aggregate whose changes reach every day);
- dead rows (rows of a segment that later segments replace) are read and thrown away by every
  read: once they are at least MAX_DEAD_SHARE of the live rows (and MIN_DEAD_ROWS), every segment
  is merged into one new base (a window model recomputing whole customers writes a third of its
  rows per delta: its reads grew by that third on every run);
- past MAX_SEGMENTS segments (MAX_ADDED_SEGMENTS when no segment replaces rows: an append or
  append_new state, whose reads cost a file per segment and no anti-join), the segments after the
  base are merged into one, with one keys table, when they hold fewer rows than half the live rows:
  the base, the bulk of the state, is not copied again (at 1M orders, merging seven 1% deltas
  writes about 100k rows where a new base wrote 920k). Otherwise every segment is merged.

The delta's own segment stays beside whatever was merged (`compacted_delta`): what the models
following the state read to learn which rows changed across the compaction (engine.builds.model_slices).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from strata_dagster.backends.base import Session
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import Segment, composite_query, merged_keys_query
from strata_dagster.state.history import SnapshotRecord
from strata_dagster.state.states import KEYS_NULL_FREE

MAX_SEGMENTS = 8  # segments of a state some of which replace rows: more, and they are merged
MAX_ADDED_SEGMENTS = 32  # segments of a state that only gains rows: more, and they are merged
MAX_DEAD_SHARE = 0.5  # dead rows against live rows: at least this, and every segment is merged
MIN_DEAD_ROWS = 1_000  # fewer dead rows than this never make a compaction by themselves
STORED_ROWS = "stored_rows"  # detail: the rows the state's segments hold, dead ones included
BASE_ROWS = "base_rows"  # detail: the rows its first segment holds
BASE_SUFFIX = "__base"
MERGED_SUFFIX = "__merged"

Kind = Literal["is_state", "base", "deltas"]


@dataclass(frozen=True)
class Compaction:
    kind: Kind  # is_state: the delta is the new base; base: every segment merged; deltas: all but the base
    reason: str  # for history


def _recorded(previous: SnapshotRecord, key: str) -> int | None:
    value = previous.detail.get(key)
    if value is not None:
        return int(value)
    # One segment: it holds the state's rows. Several, built before this was recorded: unknown.
    return previous.row_count if len(previous.segment_ids) == 1 else None


def decide(
    previous: SnapshotRecord,
    segments: Sequence[Segment],
    segment_rows: int,
    replaced_rows: int,
    live_rows: int,
    keys_table: str | None,
) -> Compaction | None:
    """Whether the new state (the previous one's `segments`, then a new segment of `segment_rows`
    rows replacing `replaced_rows` live rows by `keys_table`, `live_rows` in all) is compacted."""
    if keys_table is not None and replaced_rows == previous.row_count > 0:
        return Compaction("is_state", "the new segment replaces every live row")
    stored = _recorded(previous, STORED_ROWS)
    base = _recorded(previous, BASE_ROWS)
    if stored is not None:
        dead = stored + segment_rows - live_rows
        if dead >= MIN_DEAD_ROWS and dead >= live_rows * MAX_DEAD_SHARE:
            return Compaction("base", f"{dead} replaced rows held beside {live_rows} live rows")
    count = len(segments) + 1
    replaces = keys_table is not None or any(segment.keys_table for segment in segments[1:])
    limit = MAX_SEGMENTS if replaces else MAX_ADDED_SEGMENTS
    if count <= limit:
        return None
    if stored is not None and base is not None and (stored + segment_rows - base) * 2 < live_rows:
        return Compaction("deltas", f"{count} segments (at most {limit}): those after the base merged")
    return Compaction("base", f"{count} segments (at most {limit})")


@dataclass(frozen=True)
class Compacted:
    table_name: str  # the state's last segment now: the new base, the merged segment, or the delta
    keys_table: str | None
    segment_ids: list[str]
    detail: dict[str, Any]


def compact(
    session: Session,
    compaction: Compaction,
    previous: SnapshotRecord,
    segments: Sequence[Segment],
    delta: Segment,
    snapshot_id: str,
    live_rows: int,
) -> Compacted:
    """Write what `compaction` says: the state's segments now and what its record adds."""
    merge_keys = list(previous.detail.get("merge_keys") or ())
    grain = previous.detail.get("partition_grain")
    detail: dict[str, Any] = {
        "compacted": True,
        "compaction": compaction.reason,
        "compacted_after": list(previous.segment_ids),
        "compacted_delta": delta.table,
        "compacted_delta_keys": delta.keys_table,
    }
    detail[KEYS_NULL_FREE] = False  # the new base, or the delta that is the state, replaces nothing
    if compaction.kind != "deltas":
        name = delta.table
        if compaction.kind == "base":
            name = f"{delta.table}{BASE_SUFFIX}"
            session.create_snapshot(name, composite_query([*segments, delta], merge_keys, grain))
        detail.update({STORED_ROWS: live_rows, BASE_ROWS: live_rows})
        return Compacted(name, None, [snapshot_id], detail)
    # The segments after the base, merged: their rows no later one replaces, and every key they
    # replace in the base.
    merged = [*segments[1:], delta]
    name = f"{delta.table}{MERGED_SUFFIX}"
    session.create_snapshot(name, composite_query(merged, merge_keys, grain))
    keys_tables = [segment.keys_table for segment in merged if segment.keys_table]
    keys_table = None
    if keys_tables and merge_keys:
        keys_table = f"{name}__keys"
        session.create_snapshot(keys_table, merged_keys_query(merge_keys, keys_tables))
        detail[KEYS_NULL_FREE] = all(segment.is_null_free for segment in merged if segment.keys_table)
    rows, _ = session.content_where(snapshot_table(name))
    base = _recorded(previous, BASE_ROWS)
    assert base is not None  # decide() merges the deltas only when it knows the base's rows
    detail.update(
        {
            "compacted_after": list(previous.segment_ids[1:]),
            STORED_ROWS: base + rows,
            BASE_ROWS: base,
        }
    )
    return Compacted(name, keys_table, [previous.segment_ids[0], snapshot_id], detail)


def carried(previous: SnapshotRecord, segment_rows: int) -> dict[str, Any]:
    """What a new state that is not compacted records: its segments' rows, when known."""
    stored, base = _recorded(previous, STORED_ROWS), _recorded(previous, BASE_ROWS)
    figures: dict[str, Any] = {}
    if stored is not None:
        figures[STORED_ROWS] = stored + segment_rows
    if base is not None:
        figures[BASE_ROWS] = base
    return figures
