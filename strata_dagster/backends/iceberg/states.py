"""What one model's live state is, as the Iceberg publisher needs it: segments, keys, layout."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

# strata's properties in each Iceberg snapshot's summary; `strata.segments` only on the last
# snapshot of each commit, naming the state it holds.
SEGMENTS = "strata.segments"
ENTRY = "strata.entry"


@dataclass(frozen=True)
class StateSegment:
    """One segment of a state: its rows, and the keys (or partitions) it replaces in earlier ones."""

    snapshot_id: str
    file: Path | None  # its immutable Parquet file; None: a table or view snapshot
    rows: Callable[[], pa.Table]  # its rows, read when the file cannot be registered as it is
    replaced: Callable[[], pa.Table] | None = None  # its keys table's rows


@dataclass(frozen=True)
class ModelState:
    """A model's live state on a branch, and the run that published it."""

    model: str
    segments: tuple[StateSegment, ...]
    merge_keys: tuple[str, ...] = ()  # the columns the replaced keys name
    grain: str | None = None  # day / month / key: the replaced keys are partitions
    partition: tuple[str, str] | None = None  # (grain, column) of `partitioned_by`
    not_null: frozenset[str] = frozenset()  # contract columns declared not null
    summary: Mapping[str, str] = field(default_factory=dict)  # strata's snapshot summary properties
    # A compaction of the state `compacted_after` (segment ids) and a delta replacing the keys
    # `compacted_keys` reads: publishing onto a table at that state replaces only those keys.
    compacted_after: tuple[str, ...] = ()
    compacted_keys: Callable[[], pa.Table] | None = None
    # False when the project was not read (a rollback, a promotion): an existing table keeps its
    # partition spec and required columns.
    is_layout_known: bool = True

    @property
    def segment_ids(self) -> str:
        return ",".join(segment.snapshot_id for segment in self.segments)
