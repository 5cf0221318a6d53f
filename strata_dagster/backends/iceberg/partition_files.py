"""Rows by partition: which rows a set of keys holds, one file per partition, files that lie in one."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def partition_values(rows: pa.Table, grain: str, column: str) -> pa.Array:
    """Each row's partition: its day or month (first day) as a date, or the key itself."""
    values = rows.column(column)
    if grain == "day":
        return pc.cast(values, pa.date32())
    if grain == "month":
        return pc.cast(pc.floor_temporal(values, unit="month"), pa.date32())
    return values


def keyed_mask(rows: pa.Table, keys: pa.Table, merge_keys: tuple[str, ...], grain: str | None) -> pa.Array:
    """Which of `rows` have a key (a partition, with a `grain`) that `keys` holds, NULL-safe."""
    column = merge_keys[0]
    values = partition_values(rows, grain, column) if grain is not None else rows.column(column)
    wanted = keys.column(column)
    if grain in ("day", "month"):
        wanted = pc.cast(wanted, pa.date32())
    found = pc.fill_null(pc.is_in(values, value_set=pc.drop_null(wanted).combine_chunks()), False)
    if wanted.null_count:
        found = pc.or_(found, pc.is_null(values))
    return found


def write_by_partition(rows: pa.Table, partition: tuple[str, str], folder: Path) -> list[Path] | None:
    """`rows` as one new Parquet file per partition (one sort, one pass): pyiceberg's own write
    filters the whole table once per partition. None when a row has no partition value."""
    grain, column = partition
    values = partition_values(rows, grain, column)
    if values.null_count:
        return None
    order = pc.sort_indices(values)
    values = (
        values.take(order).combine_chunks() if isinstance(values, pa.ChunkedArray) else values.take(order)
    )
    rows = rows.take(order)
    ends = pc.run_end_encode(values).run_ends.to_pylist()
    folder.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    files, start = [], 0
    for index, end in enumerate(ends):
        path = folder / f"strata-{token}-{index:05d}.parquet"
        pq.write_table(rows.slice(start, end - start), path)
        files.append(path)
        start = end
    return files


# Parquet version 2's encodings, which Spark's Iceberg runtime read (vectorized) only from 2026:
# a file a warehouse wrote with publication off uses them (backends/duckdb/snapshot_files.py).
_LATE_ENCODINGS = frozenset(
    {"DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "BYTE_STREAM_SPLIT"}
)


def readable_everywhere(metadata: pq.FileMetaData) -> bool:
    """Whether a file uses none of the encodings older Iceberg readers cannot read."""
    return not any(
        _LATE_ENCODINGS.intersection(metadata.row_group(group).column(index).encodings)
        for group in range(metadata.num_row_groups)
        for index in range(metadata.num_columns)
    )


def registrable(partition: tuple[str, str] | None, metadata: pq.FileMetaData) -> bool:
    """A file (by its footer) can be registered when every Iceberg reader can read it, in an
    unpartitioned table or when all its rows lie in one partition."""
    if not readable_everywhere(metadata):
        return False
    if partition is None:
        return True
    grain, column = partition
    index = metadata.schema.to_arrow_schema().get_field_index(column)
    values = []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return False
        values += [stats.min, stats.max]
    return len({_partition_of(value, grain) for value in values}) <= 1


def _partition_of(value: Any, grain: str) -> Any:
    if grain == "key":
        return value
    day = value.date() if isinstance(value, dt.datetime) else value
    return day if grain == "day" else (day.year, day.month)
