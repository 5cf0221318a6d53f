"""The history tables: a read-only reader and an append-only writer (never UPDATE, never DELETE)."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import duckdb

from strata_dagster.backends.choice import backend_version
from strata_dagster.state.detail_files import SQL_KEY, STORED, DetailFiles, dumps
from strata_dagster.state.ledger import LedgerDigest, PartitionEvidence, write_ledger
from strata_dagster.state.migrations import has_history_table


@dataclass(frozen=True)
class Entry:
    entry: int
    run_id: str
    kind: str
    branch: str
    started_at: dt.datetime
    finished_at: dt.datetime
    models: tuple[str, ...]
    overrides: dict[str, str]
    backfill_of: str | None
    reason: str | None
    target_entry: int | None
    engine: str
    detail: dict[str, Any]


# The history entry kind of a Python model's frame (engine/commands/frames.py): its model is not in the project.
PYTHON_ENTRY_KIND = "python"
# A view model's snapshot detail: what it is, and the snapshots it reads (gc keeps them with it).
MATERIALIZE_KEY = "materialize"
READS_KEY = "reads"
# The input figures a later build, and Dagster's stale partitions, compare with. When a build's
# rows come out equal its live state stays (early cutoff) though these moved: the entry records
# them under KEPT_FACTS, and HistoryReader.with_kept_facts reads them over the state's own, else
# the next build recomputes the same partitions again and Dagster shows them stale for ever. The
# joined inputs' figures are left out: their tables belong to the build that made them, and older
# figures only make a later build reach more partitions, never fewer.
MOVING_FACTS = ("partition_fingerprints", "other_inputs", "upstream_segments")
KEPT_FACTS = "kept_facts"
# A window's end moves too: an early cutoff of a delta over a cdc column or a log read the window
# up to its high, so the next build starts there, with the counts at or below it (else it reads
# the window again, and a ledger's transaction deleted since would look drained). Kept under
# KEPT_WATERMARK with the window's carried facts; a state holding one of WINDOW_FACTS has a window.
KEPT_WATERMARK = "watermark"
WINDOW_FACTS = ("next_count", "output_next_count", "log_next_count")
# What a state's detail must hold for an early cutoff to have kept anything of it.
_KEPT_BY_CUTOFF = (*MOVING_FACTS, *WINDOW_FACTS)


@dataclass(frozen=True)
class SnapshotRecord:
    snapshot_id: str
    model: str
    table_name: str
    partition_key: str
    model_fingerprint: str
    content_hash: str
    row_count: int
    watermark: str | None
    created_entry: int
    is_dropped: bool = False
    row_hash_sum: str = "0"
    # For incremental states: "segments" (ids, oldest first, this one last), "keys_table",
    # "merge_keys", the window and the figures the next build checks the source against.
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def segment_ids(self) -> tuple[str, ...]:
        return tuple(self.detail.get("segments") or (self.snapshot_id,))

    @property
    def is_view(self) -> bool:
        """A `materialize: view` model's snapshot: a view over its inputs, its rows never counted."""
        return self.detail.get(MATERIALIZE_KEY) == "view"


@dataclass(frozen=True)
class EntryModel:
    model: str
    partition_key: str
    snapshot_id: str
    build_key: str
    path: str
    rows_out: int
    duration_ms: float
    sql: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class EntrySource:
    source: str
    partition_key: str
    relation: str
    fingerprint: str
    row_count: int
    row_basis: tuple[str, ...] = ()  # what the rows were hashed over: () for whole rows


def _entry(row: tuple[Any, ...]) -> Entry:
    return Entry(
        entry=int(row[0]),
        run_id=row[1],
        kind=row[2],
        branch=row[3],
        started_at=row[4],
        finished_at=row[5],
        models=tuple(row[6]),
        overrides=json.loads(row[7]) if row[7] else {},
        backfill_of=row[8],
        reason=row[9],
        target_entry=row[10],
        engine=row[11],
        detail=json.loads(row[12]) if row[12] else {},
    )


class StoredDetail(Mapping[str, Any]):
    """A history record's detail as stored, its JSON parsed when first read. A partitioned model's
    detail holds every partition's figures (hundreds of KB at thousands of partitions), and a run
    that reuses the state asks for at most a few small keys of it, most of them absent: a key whose
    quoted name is nowhere in the text is absent without parsing it (json.dumps writes every key
    as `"name"`, and a plain name needs no escape). Each name is searched for once: a run asks
    the same few names of one record many times, and each search reads the whole text. Values
    moved to a detail file (state/detail_files.py) are read from it when first asked for; the
    marker naming them is not one of the detail's keys."""

    __slots__ = ("_files", "_marker", "_moved", "_named", "_parsed", "_read", "_text")

    def __init__(self, text: str, files: DetailFiles | None = None) -> None:
        self._text = text
        self._files = files
        self._parsed: dict[str, Any] | None = None
        self._marker: dict[str, Any] | None = None
        self._moved: dict[str, Any] | None = None
        self._read: tuple[dict[str, Any] | None] | None = None  # the file's line, once read
        self._named: dict[str, bool] = {}  # plain key -> whether the text names it

    def _value(self) -> dict[str, Any]:
        if self._parsed is None:
            parsed = json.loads(self._text)
            self._marker = parsed.pop(STORED, None)
            self._parsed = parsed
        return self._parsed

    def _moved_values(self) -> dict[str, Any]:
        """The values moved to the detail file ({}: none, or the file is gone)."""
        if self._moved is None:
            self._value()
            line = self._line() if self._marker and self._marker.get("keys") else None
            self._moved = line["detail"] if line is not None else {}
        return self._moved

    def _line(self) -> dict[str, Any] | None:
        """The record's line of its detail file, read once (None: unreadable)."""
        if self._read is None:
            line = self._files.line(self._marker) if self._files is not None and self._marker else None
            self._read = (line,)
        return self._read[0]

    def stored_sql(self) -> str | None:
        """The SQL moved to the detail file with this record (None: none moved, or the file is gone)."""
        self._value()
        if not self._marker or not self._marker.get(SQL_KEY):
            return None
        line = self._line()
        return None if line is None else line.get(SQL_KEY)

    def file_problem(self) -> tuple[Path, str] | None:
        """The detail file this record's moved values are in and what is wrong with it (None: none
        moved, or it reads)."""
        if self._is_plain():
            return None
        self._value()
        if not self._marker:
            return None
        if self._files is None:
            return Path(str(self._marker.get("file"))), "missing (the warehouse has no detail files)"
        if self._line() is not None:
            return None
        return self._files.path(self._marker), self._files.problem(self._marker) or "unreadable"

    def _is_plain(self) -> bool:
        """Whether the record moved nothing (told without parsing it when the text has no marker)."""
        return self._parsed is None and f'"{STORED}"' not in self._text

    def is_absent(self, key: object) -> bool:
        """Whether `key` is certainly not in the detail, told without parsing it (False: it may be)."""
        if self._parsed is not None or not isinstance(key, str):
            return False
        named = self._named.get(key)
        if named is None:
            named = _PLAIN_KEY.fullmatch(key) is None or f'"{key}"' in self._text
            self._named[key] = named
        return not named

    def __getitem__(self, key: str) -> Any:
        if self.is_absent(key):
            raise KeyError(key)
        value = self._value()
        if key in value:
            return value[key]
        return self._moved_values()[key]

    def __contains__(self, key: object) -> bool:
        if self.is_absent(key):
            return False
        return key in self._value() or key in self._moved_values()

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        yield from self._value()
        yield from self._moved_values()

    def __len__(self) -> int:
        return len(self._value()) + len(self._moved_values())

    def __repr__(self) -> str:
        return repr(dict(self))


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")


def _may_hold(detail: Mapping[str, Any], key: str) -> bool:
    """Whether `key` may be in `detail`: exact for a dict, and for a stored detail not parsed yet,
    False only when it is certainly absent (its text never names it)."""
    return not detail.is_absent(key) if isinstance(detail, StoredDetail) else key in detail


def _snapshot(row: tuple[Any, ...], files: DetailFiles | None) -> SnapshotRecord:
    leading = cast("tuple[str, str, str, str, str, str, int, str | None, int]", row[:9])
    return SnapshotRecord(
        *leading,
        row_hash_sum=row[9] or "0",
        detail=StoredDetail(row[10], files) if row[10] else {},  # type: ignore[arg-type]  # a Mapping read as the dict
        is_dropped=bool(row[11]),
    )


def _entry_model(row: tuple[Any, ...], files: DetailFiles | None) -> EntryModel:
    detail = StoredDetail(row[8], files) if row[8] else None
    sql = row[7] or (detail.stored_sql() if detail is not None else None) or ""
    return EntryModel(
        *cast("tuple[str, str, str, str, str, int, float]", row[:7]),
        sql=sql,
        detail=detail if detail is not None else {},  # type: ignore[arg-type]  # a Mapping read as the dict
    )


def detail_file_problem(record: SnapshotRecord) -> tuple[Path, str] | None:
    """The detail file `record`'s moved values are in, and what is wrong with it (None: whole)."""
    detail = record.detail
    return detail.file_problem() if isinstance(detail, StoredDetail) else None


class HistoryReader:
    """Read-only questions about the history."""

    def __init__(self, con: duckdb.DuckDBPyConnection, files: DetailFiles | None = None) -> None:
        self.con = con
        # Where values moved out of records are: the session's (whose writer caches what it wrote),
        # else those beside the database `con` has open (None: an in-memory one holds none).
        self.files = files if files is not None else DetailFiles.of_connection(con)
        # Snapshot records by id, while a run reads them (see remember_snapshots).
        self._remembered: dict[str, SnapshotRecord] | None = None
        self._has_source_stamps: bool | None = None

    def remember_snapshots(self, on: bool) -> None:
        """Within a run, read each snapshot record once: a record never changes while one run holds
        the warehouse (gc and rollback are runs of their own)."""
        self._remembered = {} if on else None

    def entries(self) -> list[Entry]:
        rows = self.con.execute("SELECT * FROM strata.entries ORDER BY entry").fetchall()
        return [_entry(row) for row in rows]

    def entry(self, number: int) -> Entry | None:
        row = self.con.execute("SELECT * FROM strata.entries WHERE entry = ?", [number]).fetchone()
        return _entry(row) if row else None

    def latest_entry_of_run(self, run_id: str) -> Entry | None:
        """The most recent entry with this run id (a prefix of at least 6 characters also matches)."""
        rows = self.con.execute(
            "SELECT * FROM strata.entries WHERE run_id = ? OR (length(?) >= 6 AND starts_with(run_id, ?)) "
            "ORDER BY entry DESC",
            [run_id, run_id, run_id],
        ).fetchall()
        ids = {row[1] for row in rows}
        if len(ids) != 1:
            return None
        return _entry(rows[0])

    def next_entry(self) -> int:
        row = self.con.execute("SELECT coalesce(max(entry), 0) + 1 FROM strata.entries").fetchone()
        return int(row[0]) if row else 1

    def pointers(self, branch: str, as_of_entry: int | None = None) -> dict[str, tuple[str, ...]]:
        """model -> snapshot ids its view exposes on `branch` (after `as_of_entry`, else now). A
        model whose latest publication is empty was retired (operations.retire_removed): its view
        is gone, and it has no pointer, as before its first run."""
        # arg_max over a window's row_number: the same latest row per model, planned cheaper.
        rows = self.con.execute(
            "SELECT model, arg_max(snapshot_ids, entry) FROM strata.publications "
            "WHERE branch = ? AND entry <= ? GROUP BY model",
            [branch, as_of_entry if as_of_entry is not None else 2**62],
        ).fetchall()
        return {row[0]: tuple(row[1]) for row in rows if row[1]}

    def iceberg_commits(self, branch: str) -> dict[str, tuple[int, int]]:
        """model -> (entry, Iceberg snapshot id) last recorded for its table on `branch`."""
        rows = self.con.execute(
            "SELECT model, arg_max(entry, rowid), arg_max(snapshot_id, rowid) FROM strata.iceberg_commits "
            "WHERE branch = ? GROUP BY model",
            [branch],
        ).fetchall()
        return {row[0]: (int(row[1]), int(row[2])) for row in rows}

    def iceberg_catalog_seen(self, branch: str, catalog: str) -> tuple[int, str] | None:
        """(entry, catalog file stamp) of the last publication that left every table of `branch`
        in `catalog` current, if any."""
        row = self.con.execute(
            "SELECT arg_max(entry, rowid), arg_max(stamp, rowid) FROM strata.iceberg_catalog_seen "
            "WHERE branch = ? AND catalog = ?",
            [branch, catalog],
        ).fetchone()
        return None if row is None or row[0] is None else (int(row[0]), str(row[1]))

    def source_stamp_figures(
        self, source: str, relation: str, engine: str, stamp: str
    ) -> tuple[int, str] | None:
        """(row count, row-hash sum) a scan of `source` read from `relation` when the files it reads
        had `stamp`, computed by `engine`, if one was recorded."""
        if self._has_source_stamps is None:
            self._has_source_stamps = has_history_table(self.con, "source_stamps")
        if not self._has_source_stamps:
            return None
        row = self.con.execute(
            "SELECT row_count, row_hash_sum FROM strata.source_stamps "
            "WHERE source = ? AND relation = ? AND engine = ? AND stamp = ? ORDER BY rowid DESC LIMIT 1",
            [source, relation, engine, stamp],
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def branches_differing_in_case(self, branch: str) -> list[str]:
        """The branches whose names differ from `branch` in case only (DuckDB gives them one schema)."""
        rows = self.con.execute(
            "SELECT DISTINCT branch FROM strata.publications WHERE lower(branch) = lower(?) AND branch <> ? ORDER BY 1",
            [branch, branch],
        ).fetchall()
        return [row[0] for row in rows]

    def branches(self) -> list[str]:
        """The branches with at least one view (a deleted branch has none: operations.delete_branch)."""
        return [
            row[0]
            for row in self.con.execute(
                "SELECT branch FROM (SELECT branch, arg_max(snapshot_ids, entry) AS ids "
                "FROM strata.publications GROUP BY branch, model) WHERE len(ids) > 0 "
                "GROUP BY branch ORDER BY 1"
            ).fetchall()
        ]

    def snapshot(self, snapshot_id: str) -> SnapshotRecord | None:
        if self._remembered is not None and snapshot_id in self._remembered:
            return self._remembered[snapshot_id]
        row = self.con.execute(
            "SELECT * FROM strata.snapshot_states WHERE snapshot_id = ?", [snapshot_id]
        ).fetchone()
        record = _snapshot(row, self.files) if row else None
        if record is not None and self._remembered is not None:
            self._remembered[snapshot_id] = record
        return record

    def prefetch_snapshots(self, snapshot_ids: Sequence[str]) -> None:
        """Read the records of `snapshot_ids` in one query, for the `snapshot` lookups a run makes
        next (remembered only while a run reads them)."""
        if self._remembered is None or not snapshot_ids:
            return
        # list_contains over the list parameter: DuckDB plans `IN (SELECT unnest(?))` as a join
        # that cost 3-5 ms more on a 2-core machine, for the same rows.
        rows = self.con.execute(
            "SELECT * FROM strata.snapshot_states WHERE list_contains(?, snapshot_id)",
            [list(snapshot_ids)],
        ).fetchall()
        for row in rows:
            record = _snapshot(row, self.files)
            self._remembered[record.snapshot_id] = record

    def snapshots(self) -> list[SnapshotRecord]:
        rows = self.con.execute("SELECT * FROM strata.snapshot_states ORDER BY created_entry").fetchall()
        return [_snapshot(row, self.files) for row in rows]

    def snapshot_for_build_key(self, build_key: str) -> SnapshotRecord | None:
        if self._remembered is not None:
            # While a run reads them the record is usually prefetched already: ask for the key's
            # rows only (a few ids, no join: the join through snapshot_states cost about 2 ms more)
            # and take the latest whose record exists and is not dropped, as the query below does.
            rows = self.con.execute(
                "SELECT snapshot_id, entry FROM strata.build_keys WHERE build_key = ?", [build_key]
            ).fetchall()
            for snapshot_id, _ in sorted(rows, key=lambda row: row[1], reverse=True):
                record = self.snapshot(snapshot_id)
                if record is not None and not record.is_dropped:
                    return record
            return None
        row = self.con.execute(
            "SELECT s.* FROM strata.snapshot_states s JOIN strata.build_keys k USING (snapshot_id) "
            "WHERE k.build_key = ? AND NOT s.is_dropped ORDER BY k.entry DESC LIMIT 1",
            [build_key],
        ).fetchone()
        return _snapshot(row, self.files) if row else None

    def entry_models(self, entry: int) -> list[EntryModel]:
        rows = self.con.execute(
            "SELECT model, partition_key, snapshot_id, build_key, path, rows_out, duration_ms, sql, detail "
            "FROM strata.entry_models WHERE entry = ? ORDER BY rowid",
            [entry],
        ).fetchall()
        return [_entry_model(row, self.files) for row in rows]

    def first_build_of(self, model: str, snapshot_id: str) -> int | None:
        """The first entry with `model` as `snapshot_id`: the one that built it."""
        row = self.con.execute(
            "SELECT min(entry) FROM strata.entry_models WHERE model = ? AND snapshot_id = ?",
            [model, snapshot_id],
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def last_build_of(self, model: str, snapshot_id: str) -> int | None:
        """The latest entry that built or kept `model` as `snapshot_id`: the inputs it read."""
        row = self.con.execute(
            "SELECT max(entry) FROM strata.entry_models WHERE model = ? AND snapshot_id = ?",
            [model, snapshot_id],
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def live_build_of(self, model: str, snapshot_id: str, branch: str) -> int | None:
        """The entry whose inputs `model`'s live `snapshot_id` on `branch` stands for: the latest on
        the branch that built or kept it, going back past each rollback to the entry it restored (a
        state kept through a rollback's target and after it stands for the target's inputs again);
        else the latest anywhere (a state promoted from another branch)."""
        rows = self.con.execute(
            "SELECT DISTINCT m.entry, 'built', NULL FROM strata.entry_models AS m "
            "JOIN strata.entries AS e ON e.entry = m.entry WHERE m.model = ? AND m.snapshot_id = ? "
            "AND e.branch = ? "
            "UNION ALL SELECT entry, 'rollback', target_entry FROM strata.entries "
            "WHERE branch = ? AND kind = 'rollback' ORDER BY 1 DESC",
            [model, snapshot_id, branch, branch],
        ).fetchall()
        as_of = None  # the history as it stood right after this entry (None: now)
        for entry, what, target in rows:
            if as_of is not None and entry > as_of:
                continue
            if what == "rollback":
                as_of = int(target) if target is not None else as_of
            else:
                return int(entry)
        return self.last_build_of(model, snapshot_id)

    def with_kept_facts(self, record: SnapshotRecord, branch: str) -> SnapshotRecord:
        """`record` with the input figures in effect for it on `branch` (MOVING_FACTS, and a window's
        end with its counts): those of the latest entry that decided it for the inputs the branch
        shows. An early cutoff kept it with new figures (the state stayed, its figures moved); a run
        that reused it by a build key takes the figures of the entry that recorded the key; a
        rollback takes those in effect right after the entry it went back to (its inputs are that
        entry's again)."""
        # A stored detail may name a moving fact without holding it at its top level: it is
        # parsed (hundreds of KB for a partitioned model) only when an early cutoff kept figures.
        if not any(_may_hold(record.detail, key) for key in _KEPT_BY_CUTOFF):
            return record
        # The state's early cutoffs on any branch first (usually none: one small scan), and their
        # branches only when there are some.
        cutoffs = self.con.execute(
            "SELECT count(*) FROM strata.entry_models "
            "WHERE model = ? AND snapshot_id = ? AND path = 'cutoff' AND entry > ?",
            [record.model, record.snapshot_id, record.created_entry],
        ).fetchone()
        if not cutoffs or not cutoffs[0] or not any(key in record.detail for key in _KEPT_BY_CUTOFF):
            return record
        decided = self.con.execute(
            "SELECT m.entry, m.path, m.build_key, m.detail LIKE '%\"' || ? || '\"%' FROM strata.entry_models AS m "
            "JOIN strata.entries AS e ON e.entry = m.entry WHERE m.model = ? AND m.snapshot_id = ? "
            "AND m.path IN ('cutoff', 'reused') AND e.branch = ? AND m.entry > ? ORDER BY m.entry DESC",
            [KEPT_FACTS, record.model, record.snapshot_id, branch, record.created_entry],
        ).fetchall()
        rollbacks = self.con.execute(
            "SELECT entry, target_entry FROM strata.entries WHERE branch = ? AND kind = 'rollback' "
            "AND entry > ? AND target_entry >= ? ORDER BY entry DESC",
            [branch, record.created_entry, record.created_entry],
        ).fetchall()
        events = sorted(
            [(int(entry), path, key, text) for entry, path, key, text in decided]
            + [(int(entry), "rollback", None, int(target)) for entry, target in rollbacks],
            key=lambda event: event[0],
            reverse=True,
        )
        as_of = None  # the figures in effect right after this entry (None: now)
        for entry, path, key, payload in events:
            if as_of is not None and entry > as_of:
                continue
            if path == "rollback":
                as_of = payload
            elif path == "reused":
                as_of = min(self._key_entry(key, record.snapshot_id, entry), entry - 1)
            elif payload and (kept := self._kept_facts(record, entry)):
                watermark = kept.pop(KEPT_WATERMARK, record.watermark)
                return replace(record, watermark=watermark, detail={**record.detail, **kept})
        return record

    def _kept_facts(self, record: SnapshotRecord, entry: int) -> dict[str, Any] | None:
        """The figures the early cutoff of `record` at `entry` kept (None: none)."""
        row = self.con.execute(
            "SELECT detail FROM strata.entry_models WHERE entry = ? AND model = ? AND snapshot_id = ? "
            "AND path = 'cutoff'",
            [entry, record.model, record.snapshot_id],
        ).fetchone()
        return StoredDetail(row[0], self.files).get(KEPT_FACTS) if row and row[0] else None

    def _key_entry(self, build_key: str, snapshot_id: str, before: int) -> int:
        """The entry that recorded `build_key` for `snapshot_id` (before entry `before`)."""
        row = self.con.execute(
            "SELECT min(entry) FROM strata.build_keys WHERE build_key = ? AND snapshot_id = ? AND entry < ?",
            [build_key, snapshot_id, before],
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else before - 1

    def detail_file_names(self) -> set[str]:
        """The detail files the history's records name (state/detail_files.py)."""
        marker = f'%"{STORED}"%'
        path = f"$.{STORED}.file"
        rows = self.con.execute(
            "SELECT json_extract_string(detail, ?) FROM strata.snapshots WHERE CAST(detail AS VARCHAR) LIKE ? "
            "UNION SELECT json_extract_string(detail, ?) FROM strata.entry_models "
            "WHERE CAST(detail AS VARCHAR) LIKE ?",
            [path, marker, path, marker],
        ).fetchall()
        return {str(row[0]) for row in rows if row[0]}

    def last_observed(self, source: str, relation: str) -> str | None:
        """The fingerprint of the whole source the latest entry that read `relation` for it
        recorded (None: no entry did)."""
        row = self.con.execute(
            "SELECT fingerprint FROM strata.entry_sources WHERE source = ? AND relation = ? "
            "AND partition_key = '' ORDER BY entry DESC LIMIT 1",
            [source, relation],
        ).fetchone()
        return None if row is None else str(row[0])

    def entry_sources(self, entry: int) -> list[EntrySource]:
        rows = self.con.execute(
            "SELECT source, partition_key, relation, fingerprint, row_count, row_basis FROM strata.entry_sources "
            "WHERE entry = ? ORDER BY source, partition_key",
            [entry],
        ).fetchall()
        return [
            EntrySource(*cast("tuple[str, str, str, str, int]", row[:5]), row_basis=tuple(row[5] or ()))
            for row in rows
        ]


class HistoryWriter:
    """Appends to the history. Callers wrap a whole publication in one transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection, files: DetailFiles | None = None) -> None:
        self.con = con
        self.files = files  # where a record's bulky values go (None, or not `writes`: in its row)
        self.entries_added: set[int] = set()  # by this writer (committed or not)

    def add_entry(
        self,
        *,
        entry: int,
        run_id: str,
        kind: str,
        branch: str,
        started_at: dt.datetime,
        models: list[str],
        overrides: dict[str, str],
        backfill_of: str | None = None,
        reason: str | None = None,
        target_entry: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.con.execute(
            "INSERT INTO strata.entries VALUES (?, ?, ?, ?, ?, now(), ?, ?, ?, ?, ?, ?, ?)",
            [
                entry,
                run_id,
                kind,
                branch,
                started_at,
                models,
                json.dumps(overrides, sort_keys=True),
                backfill_of,
                reason,
                target_entry,
                backend_version(),
                dumps(detail or {}),
            ],
        )
        self.entries_added.add(entry)

    def add_source(
        self,
        entry: int,
        source: str,
        partition_key: str,
        relation: str,
        fingerprint: str,
        rows: int,
        row_basis: tuple[str, ...] = (),
    ) -> None:
        self.con.execute(
            "INSERT INTO strata.entry_sources VALUES (?, ?, ?, ?, ?, ?, ?)",
            [entry, source, partition_key, relation, fingerprint, rows, list(row_basis) or None],
        )

    def add_ledger(
        self,
        entry: int,
        source: str,
        partitions: Sequence[PartitionEvidence],
        reset_reason: str | None,
        expired: Sequence[str] = (),
        digest: LedgerDigest | None = None,
    ) -> None:
        write_ledger(self.con, entry, source, partitions, reset_reason, expired, digest)

    def add_snapshot(self, record: SnapshotRecord) -> None:
        self.add_snapshots([record])

    def add_snapshots(self, records: Sequence[SnapshotRecord]) -> None:
        details = self._stored([record.detail for record in records])
        _insert_rows(
            self.con,
            "INSERT INTO strata.snapshots SELECT unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), "
            "unnest(?), unnest(?), unnest(?), unnest(?), now(), unnest(?), unnest(?)",
            [
                [
                    record.snapshot_id,
                    record.model,
                    record.table_name,
                    record.partition_key,
                    record.model_fingerprint,
                    record.content_hash,
                    record.row_count,
                    record.watermark,
                    record.created_entry,
                    record.row_hash_sum,
                    detail,
                ]
                for record, (detail, _) in zip(records, details, strict=True)
            ],
        )

    def _stored(
        self, details: Sequence[Mapping[str, Any]], sqls: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """Each record's detail text and SQL for its row, bulk moved to a detail file if it may."""
        if self.files is not None and self.files.writes:
            return self.files.store(details, sqls)
        return [
            (dumps(detail), sql) for detail, sql in zip(details, sqls or [""] * len(details), strict=True)
        ]

    def add_build_key(self, build_key: str, snapshot_id: str, entry: int) -> None:
        self.add_build_keys([(build_key, snapshot_id)], entry)

    def add_build_keys(self, keys: Sequence[tuple[str, str]], entry: int) -> None:
        """(build key, snapshot id) pairs registered by `entry`."""
        _insert_rows(
            self.con,
            "INSERT INTO strata.build_keys SELECT unnest(?), unnest(?), unnest(?)",
            [[build_key, snapshot_id, entry] for build_key, snapshot_id in keys],
        )

    def add_entry_model(self, entry: int, record: EntryModel) -> None:
        self.add_entry_models(entry, [record])

    def add_entry_models(self, entry: int, records: Sequence[EntryModel]) -> None:
        details = self._stored([record.detail for record in records], [record.sql for record in records])
        _insert_rows(
            self.con,
            "INSERT INTO strata.entry_models SELECT unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), "
            "unnest(?), unnest(?), unnest(?), unnest(?), unnest(?)",
            [
                [
                    entry,
                    record.model,
                    record.partition_key,
                    record.snapshot_id,
                    record.build_key,
                    record.path,
                    record.rows_out,
                    record.duration_ms,
                    sql,
                    detail,
                ]
                for record, (detail, sql) in zip(records, details, strict=True)
            ],
        )

    def add_publication(self, entry: int, branch: str, model: str, snapshot_ids: list[str]) -> None:
        self.add_publications(entry, branch, {model: snapshot_ids})

    def add_publications(self, entry: int, branch: str, pointers: Mapping[str, list[str]]) -> None:
        """Each model's new view pointer (its snapshot ids) on `branch`."""
        _insert_rows(
            self.con,
            "INSERT INTO strata.publications SELECT unnest(?), unnest(?), unnest(?), unnest(?)",
            [[entry, branch, model, snapshot_ids] for model, snapshot_ids in pointers.items()],
        )

    def add_iceberg_commits(self, entry: int, branch: str, snapshots: Mapping[str, int]) -> None:
        """The Iceberg snapshot now current in each model's table, holding `entry`'s state."""
        _insert_rows(
            self.con,
            "INSERT INTO strata.iceberg_commits SELECT unnest(?), unnest(?), unnest(?), unnest(?), now()",
            [[entry, branch, model, snapshot_id] for model, snapshot_id in snapshots.items()],
        )

    def add_iceberg_catalog_seen(self, entry: int, branch: str, catalog: str, stamp: str) -> None:
        """Every table of `branch` in `catalog` holds `entry`'s state; the catalog file is at `stamp`."""
        self.con.execute(
            "INSERT INTO strata.iceberg_catalog_seen VALUES (?, ?, ?, ?, now())",
            [entry, branch, catalog, stamp],
        )

    def add_source_stamps(self, stamps: Sequence[tuple[str, str, str, str, int, str]]) -> None:
        """Each (source, relation, engine, stamp, row count, row-hash sum) a scan read."""
        _insert_rows(
            self.con,
            "INSERT INTO strata.source_stamps "
            "SELECT unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), now()",
            stamps,
        )

    def add_dropped(self, snapshot_id: str, entry: int) -> None:
        self.con.execute("INSERT INTO strata.dropped_snapshots VALUES (?, ?, now())", [snapshot_id, entry])


def _insert_rows(con: duckdb.DuckDBPyConnection, statement: str, rows: Sequence[Sequence[Any]]) -> None:
    """Many rows in one INSERT: `statement` selects `unnest(?)` per column, and each column's
    values go as one list (one statement costs a millisecond or so, whatever its row count)."""
    if rows:
        con.execute(statement, [list(column) for column in zip(*rows, strict=True)])
