"""A run's publication: its history entry and the branch's views, written in the run's transaction.

`Publication` is everything a run records, as one value: the snapshots and build keys its builds
made, each model's entry line, the sources and ledgers it read, and the views it points. The run
id is a content id of what the run consumed and of what the branch's views expose after it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from strata_dagster.backends.base import Session
from strata_dagster.engine.paths import UNPARTITIONED
from strata_dagster.engine.sources.business import SOURCE_VERSIONS, BusinessReading
from strata_dagster.engine.sources.readings import SourceState
from strata_dagster.faults import checkpoint
from strata_dagster.fingerprint import digest
from strata_dagster.state.history import EntryModel, HistoryReader, SnapshotRecord
from strata_dagster.state.states import state_query


@dataclass(frozen=True)
class Publication:
    """What a run records in history and points the branch's views at."""

    entry: int
    kind: str  # run, backfill, ...
    branch: str
    schema: str  # the branch's schema of views
    started_at: dt.datetime
    models: tuple[str, ...]  # the selection
    overrides: Mapping[str, str]
    only_stale: bool
    full_refresh: bool
    partitions: tuple[str, ...]  # `--partitions` as asked
    requested: Mapping[str, tuple[str, ...]]  # model -> the partition keys rebuilt on request
    backfill_of: str | None
    reason: str | None
    sources: tuple[SourceState, ...]  # every source the run read
    fingerprints: Mapping[str, str]  # model -> its code's fingerprint
    ledgers: Mapping[str, BusinessReading]  # business-versioned sources read, their ledgers advanced
    snapshots: tuple[SnapshotRecord, ...]  # new snapshots
    keys: tuple[tuple[str, str], ...]  # (build key, snapshot id) the builds recorded
    entry_models: tuple[EntryModel, ...]  # each model's line of the entry
    views: Mapping[str, SnapshotRecord]  # model -> the state its live view shows from now on
    chosen: Mapping[str, SnapshotRecord]  # every model of the run -> its state after it

    def run_id(self, reader: HistoryReader, pointers: Mapping[str, tuple[str, ...]]) -> str:
        """A content id of what the run consumed and of the rows every view of its branch exposes
        after it: equal ids only for equal published contents, so `rollback`, `replay` and
        `backfill` reach every state a run left (a rebuild giving the same rows in a new snapshot
        keeps the id). `pointers`: the branch's views before the run."""
        return digest(
            "run",
            self.kind,
            self.branch,
            list(self.models),
            self.only_stale,
            self.full_refresh,
            self.backfill_of,
            *([sorted(self.requested.items())] if self.requested else []),
            sorted((state.name, state.fingerprint) for state in self.sources),
            sorted(self.fingerprints.items()),
            self._branch_contents(reader, pointers),
        )

    def _branch_contents(
        self, reader: HistoryReader, pointers: Mapping[str, tuple[str, ...]]
    ) -> list[tuple[str, str]]:
        """(model, content identity) of every view of the branch after the run: the run's models
        as built, the others as `pointers` (before the run) have them."""
        contents = {name: record.content_hash for name, record in self.chosen.items()}
        for name, ids in pointers.items():
            if name not in contents and ids:
                head = reader.snapshot(ids[-1])
                contents[name] = head.content_hash if head is not None else ",".join(ids)
        return sorted(contents.items())


def publish(session: Session, publication: Publication, run_id: str) -> None:
    """Point the views and write the history entry (inside the run's transaction)."""
    reader, writer = session.history, session.writer
    for name, record in publication.views.items():
        session.point_view_at(publication.schema, name, state_query(reader, record))
    checkpoint("views_pointed")
    writer.add_entry(
        entry=publication.entry,
        run_id=run_id,
        kind=publication.kind,
        branch=publication.branch,
        started_at=publication.started_at,
        models=list(publication.models),
        overrides=dict(publication.overrides),
        backfill_of=publication.backfill_of,
        reason=publication.reason,
        detail={
            "only_stale": publication.only_stale,
            "full_refresh": publication.full_refresh,
            **({"partitions": list(publication.partitions)} if publication.partitions else {}),
            **(
                {SOURCE_VERSIONS: {name: read.version() for name, read in publication.ledgers.items()}}
                if publication.ledgers
                else {}
            ),
        },
    )
    for name, read in publication.ledgers.items():
        writer.add_ledger(
            publication.entry,
            name,
            read.consumed if read.reset_reason else read.new,
            read.reset_reason,
            read.expired,
            read.ledger_digest(),
        )
    for state in publication.sources:
        writer.add_source(
            publication.entry,
            state.name,
            UNPARTITIONED,
            state.relation,
            state.fingerprint,
            state.row_count,
            state.row_basis,
        )
    writer.add_snapshots(publication.snapshots)
    writer.add_build_keys(publication.keys, publication.entry)
    writer.add_entry_models(publication.entry, publication.entry_models)
    writer.add_publications(
        publication.entry,
        publication.branch,
        {name: list(record.segment_ids) for name, record in publication.views.items()},
    )
    checkpoint("history_written")
