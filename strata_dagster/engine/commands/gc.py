"""Garbage collection: drop the snapshots nothing needs any more, and optionally shrink the file.

A snapshot is needed when a branch exposes it, or when a kept run published it, built it or
builds on it (the segments of an incremental state). Runs are kept by count (`keep`: the last N
runs and backfills) and by age (`older_than`: every run younger than that); with both, a run
either rule keeps is kept. A kept backfill also keeps the run it corrects.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from strata_dagster.backends.base import ServingCollection, Session
from strata_dagster.backends.choice import current_backend
from strata_dagster.backends.duckdb import listing, partition_evidence
from strata_dagster.backends.duckdb.compaction import compact, file_bytes
from strata_dagster.backends.duckdb.serving import grace_seconds
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.builds.joined_inputs import FIGURES
from strata_dagster.engine.builds.key_bucket_figures import BUCKET_FIGURES
from strata_dagster.engine.builds.sliding_window import WINDOW_STATE
from strata_dagster.engine.context import parse_cache_dir
from strata_dagster.engine.iceberg_publication import expire_branches
from strata_dagster.errors import E_BACKEND_UNSUPPORTED, E_GC, StrataError
from strata_dagster.faults import checkpoint
from strata_dagster.fingerprint import digest
from strata_dagster.language import parse_cache
from strata_dagster.state.history import READS_KEY, Entry, HistoryReader, SnapshotRecord

# Spark readers query snapshot tables directly: one superseded less than this ago may still be read.
_DURATION = re.compile(r"^\s*([0-9]+)\s*([mhdw])\s*$", re.IGNORECASE | re.ASCII)
# The longest age a run is kept by: a century (a datetime cannot reach back much further).
MAX_AGE = dt.timedelta(days=36_500)
_UNIT = {
    "m": dt.timedelta(minutes=1),
    "h": dt.timedelta(hours=1),
    "d": dt.timedelta(days=1),
    "w": dt.timedelta(weeks=1),
}


def parse_age(text: str, option: str = "--older-than") -> dt.timedelta:
    """`30m`, `12h`, `30d`, `2w` as a timedelta."""
    match = _DURATION.match(text)
    if match is None:
        raise StrataError(
            E_GC,
            f"`{option} {text}` is not a duration",
            hint="give a whole number and a unit: 30m (minutes), 12h (hours), 30d (days) or 2w (weeks)",
        )
    count, unit = int(match.group(1)), _UNIT[match.group(2).lower()]
    if count > MAX_AGE // unit:
        raise StrataError(
            E_GC,
            f"`{option} {text}` is longer than strata keeps time",
            hint=f"give at most {MAX_AGE.days}d (a century), in minutes, hours, days or weeks",
        )
    return count * unit


@dataclass(frozen=True)
class GcResult:
    dropped_snapshots: tuple[SnapshotRecord, ...]
    kept: int
    # Bytes the dropped snapshots freed: inside the file after a CHECKPOINT, or, compacted, the
    # bytes the file itself shrank by.
    reclaimed_bytes: int
    file_bytes_before: int
    file_bytes_after: int
    is_compacted: bool
    # The serving copy's retired catalogs and Parquet files removed (backends/duckdb/serving.py).
    serving: ServingCollection = ServingCollection(0, 0, 0)
    # Listing cache files of business-versioned sources whose folder is gone (backends/duckdb/listing.py).
    listings_removed: int = 0
    # Parsed-module cache files of project folders that are gone (language/parse_cache.py).
    parsed_removed: int = 0
    # Iceberg snapshots expired (engine/iceberg_publication.py): all but each table's current one
    # and those of kept runs.
    iceberg_expired: int = 0
    # Records of source scans under stamps their files have since left (strata.source_stamps).
    stamps_pruned: int = 0

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(record.snapshot_id for record in self.dropped_snapshots)


def gc(
    warehouse: Path,
    keep: int | None = None,
    *,
    older_than: dt.timedelta | None = None,
    compact_file: bool = False,
    now: dt.datetime | None = None,
    grace: dt.timedelta | None = None,
) -> GcResult:
    """Drop snapshot tables that no branch exposes and no kept run needs; `compact_file` then
    rewrites the warehouse without its free space. A snapshot live on a branch less than `grace`
    ago is kept too (default: none on DuckDB, whose readers read the serving copy; an hour on
    Spark, where readers query the snapshots themselves and a dropped one fails their query)."""
    if keep is None and older_than is None:
        raise StrataError(
            E_GC, "gc needs to know which runs to keep", hint="give --keep N, --older-than 30d, or both"
        )
    if keep is not None and keep < 0:
        raise StrataError(E_GC, f"--keep {keep} is negative", hint="give a number of runs, 0 or more")
    has_file = current_backend().capabilities.has_warehouse_file
    if compact_file and not has_file:
        raise StrataError(
            E_BACKEND_UNSUPPORTED,
            "`--compact` rewrites a DuckDB file; a Spark warehouse frees a snapshot's files when gc drops it",
            hint="leave out --compact",
        )
    serving_grace = grace_seconds()  # read before anything is dropped: a bad value changes nothing
    live_grace = grace if grace is not None else default_grace()
    moment = now if now is not None else _now()
    before = file_bytes(warehouse) if has_file and warehouse.exists() else 0
    with open_session(warehouse, must_exist=True) as session:
        reader = session.history
        kept_entries = _kept_runs(reader.entries(), keep, older_than, moment)
        needed = _needed(reader, kept_entries) | _recently_live(reader, moment - live_grace)
        doomed = [
            record
            for record in reader.snapshots()
            if not record.is_dropped and record.snapshot_id not in needed
        ]
        # Before any file goes: an expired Iceberg snapshot no longer names the files it read.
        iceberg_expired = expire_branches(session, warehouse, {entry.entry for entry in kept_entries})
        session.checkpoint()
        free_before = session.free_bytes()
        if doomed:
            _drop(session, doomed, keep, older_than)
        stamps_pruned = session.prune_source_stamps()
        session.checkpoint()
        reclaimed = session.free_bytes() - free_before
        # Under the writer's lock, with the catalog current: no other writer is exporting files.
        session.refresh_serving(warehouse)
        collected = session.collect_files(warehouse, serving_grace)
        cache_dir = partition_evidence.listing_cache_dir(session.database_path())
        listings_removed = listing.prune_cache(cache_dir) if cache_dir is not None else 0
        parsed_dir = parse_cache_dir(warehouse)
        parsed_removed = parse_cache.prune(parsed_dir) if parsed_dir is not None else 0
    if compact_file:
        compaction = compact(warehouse, on_step=checkpoint)
        reclaimed = before - compaction.bytes_after
    # Snapshots stored as files free their bytes when gc removes the files (backends/duckdb/snapshot_files.py).
    reclaimed += collected.snapshot_bytes_removed
    return GcResult(
        tuple(doomed),
        len(kept_entries),
        max(reclaimed, 0),
        before,
        file_bytes(warehouse) if has_file else 0,
        compact_file,
        collected,
        listings_removed,
        parsed_removed,
        iceberg_expired,
        stamps_pruned,
    )


def _kept_runs(
    entries: list[Entry], keep: int | None, older_than: dt.timedelta | None, now: dt.datetime
) -> list[Entry]:
    runs = [entry for entry in entries if entry.kind in ("run", "backfill")]
    by_count = {entry.entry for entry in runs[-keep:]} if keep else set()
    by_age = {entry.entry for entry in runs if entry.started_at >= now - older_than} if older_than else set()
    kept = by_count | by_age
    # A kept backfill pins the run it corrects: that run stays intact for rollback, replay and verify.
    corrected = {entry.backfill_of for entry in runs if entry.entry in kept and entry.backfill_of}
    return [entry for entry in runs if entry.entry in kept or entry.run_id in corrected]


def _needed(reader: HistoryReader, kept_entries: list[Entry]) -> set[str]:
    referenced: set[str] = set()
    for branch in reader.branches():
        for ids in reader.pointers(branch).values():
            referenced.update(ids)
    for entry in kept_entries:
        for ids in reader.pointers(entry.branch, as_of_entry=entry.entry).values():
            referenced.update(ids)
        for model in reader.entry_models(entry.entry):
            head = reader.snapshot(model.snapshot_id)
            referenced.update(head.segment_ids if head is not None else (model.snapshot_id,))
    return _with_reads(reader, referenced)


def default_grace() -> dt.timedelta:
    """How long a superseded snapshot outlives its last publication, by engine."""
    return current_backend().capabilities.gc_grace


def _recently_live(reader: HistoryReader, since: dt.datetime) -> set[str]:
    """Every snapshot a branch exposed at some moment after `since`: the pointers of each entry
    finished since then, and those the first of them superseded (live until it finished)."""
    entries = reader.entries()
    recent = [entry for entry in entries if entry.finished_at >= since]
    if not recent:
        return set()
    referenced: set[str] = set()
    first = recent[0].entry
    for branch in reader.branches():
        for as_of in [first - 1, *(entry.entry for entry in recent)]:
            for ids in reader.pointers(branch, as_of_entry=as_of).values():
                referenced.update(ids)
    return _with_reads(reader, referenced)


def _with_reads(reader: HistoryReader, referenced: set[str]) -> set[str]:
    """`referenced` and, transitively, the snapshots a view snapshot among them reads: a view
    whose tables were dropped could not be read, rolled back to or promoted."""
    needed = set(referenced)
    pending = list(referenced)
    while pending:
        record = reader.snapshot(pending.pop())
        for snapshot_id in (record.detail.get(READS_KEY) or ()) if record is not None else ():
            head = reader.snapshot(snapshot_id)
            for segment_id in head.segment_ids if head is not None else (snapshot_id,):
                if segment_id not in needed:
                    needed.add(segment_id)
                    pending.append(segment_id)
    return needed


def _figures_tables(record: SnapshotRecord) -> list[str]:
    """The per-key figures tables of a partitioned build's joined inputs (engine.builds.joined_inputs)."""
    return [figures["table"] for figures in (record.detail.get(FIGURES) or {}).values()]


def _drop(
    session: Session, doomed: list[SnapshotRecord], keep: int | None, older_than: dt.timedelta | None
) -> None:
    reader = session.history
    writer = session.writer
    entry = reader.next_entry()
    doomed_ids = {record.snapshot_id for record in doomed}
    # A build whose joined input did not change carries the figures table of the build before.
    figures_kept = {
        table
        for record in reader.snapshots()
        if not record.is_dropped and record.snapshot_id not in doomed_ids
        for table in _figures_tables(record)
    }
    with session.transaction():
        for record in doomed:
            session.drop_snapshot(record.table_name)
            for companion in (
                "keys_table",
                WINDOW_STATE,
                "compacted_delta",
                "compacted_delta_keys",
                BUCKET_FIGURES,
            ):
                if record.detail.get(companion):
                    session.drop_snapshot(record.detail[companion])
            for table in set(_figures_tables(record)) - figures_kept:
                session.drop_snapshot(table)
            writer.add_dropped(record.snapshot_id, entry)
        writer.add_entry(
            entry=entry,
            run_id=digest("gc", sorted(record.snapshot_id for record in doomed)),
            kind="gc",
            branch=DEFAULT_BRANCH,
            started_at=_now(),
            models=sorted({record.model for record in doomed}),
            overrides={},
            detail={
                "keep": keep,
                "older_than_seconds": older_than.total_seconds() if older_than is not None else None,
                "dropped": [record.snapshot_id for record in doomed],
            },
        )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
