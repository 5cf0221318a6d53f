"""A model's state: the head snapshot record and the segments it stands for."""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.sql.segments import Segment, composite_query, composite_tables
from strata_dagster.state.history import HistoryReader, SnapshotRecord

KEYS_NULL_FREE = "keys_null_free"  # detail: the state's keys table holds no NULL key


def segments_of(history: HistoryReader, record: SnapshotRecord) -> list[Segment]:
    segments = []
    for snapshot_id in record.segment_ids:
        segment = record if snapshot_id == record.snapshot_id else history.snapshot(snapshot_id)
        if segment is None:
            raise AssertionError(f"history names segment {snapshot_id} but has no record of it")
        detail = segment.detail
        segments.append(
            Segment(segment.table_name, detail.get("keys_table"), bool(detail.get(KEYS_NULL_FREE)))
        )
    return segments


def merge_keys_of(record: SnapshotRecord) -> list[str]:
    return list(record.detail.get("merge_keys") or ())


def state_tables(history: HistoryReader, record: SnapshotRecord) -> tuple[str, ...]:
    """Every snapshot-schema table the state's view reads."""
    segments = segments_of(history, record)
    # Merge keys name the keys tables of later segments only: a one-segment state's are not read
    # (a partitioned model's detail, hundreds of KB, is then not parsed for them).
    return composite_tables(segments, merge_keys_of(record) if len(segments) > 1 else ())


def grain_of(record: SnapshotRecord) -> str | None:
    """`day` / `month` / `key` for a partitioned state (its keys are partitions), else None."""
    return record.detail.get("partition_grain")


def state_query(history: HistoryReader, record: SnapshotRecord) -> exp.Query:
    """The rows a state stands for: what its live view selects."""
    return composite_query(segments_of(history, record), merge_keys_of(record), grain_of(record))
