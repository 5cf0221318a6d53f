"""Partition ledgers of business-versioned sources: which partitions were consumed, and the cheap
evidence of what each held (docs/architecture.md, R8), as the history records them.

The ledger lives in the history schema, append-only: a run adds the partitions it consumed, and a
reset row starts a new ledger (a first read, a full refresh, or a rebuild after a broken
assumption). How the evidence is listed now: backends/duckdb/partition_evidence.py.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from collections.abc import Sequence
from typing import NamedTuple

import duckdb

from strata_dagster.state.migrations import has_history_table


class PartitionEvidence(NamedTuple):
    """One partition of a source as listed now: its key (the partition value as text), its row
    count, the evidence of its content, its files (file sources) and whether it may be consumed.
    A named tuple: a run lists thousands of them."""

    key: str
    rows: int
    evidence: str
    files: tuple[str, ...] = ()
    is_complete: bool = True
    row_hash_sum: str | None = None  # hash of its rows, computed once when it is consumed


@functools.lru_cache(maxsize=1 << 16)
def order_of(key: str) -> tuple[int, object]:
    """A total order over partition keys: integers numerically, dates and timestamps in time."""
    if re.fullmatch(r"-?\d+", key):
        return (0, int(key))
    try:
        return (1, dt.datetime.fromisoformat(key))
    except ValueError:
        return (2, key)


UNCOUNTED = -1


def is_key(value: str) -> bool:
    """Whether a folder's value is a partition key: an integer, a date or a timestamp (`order_of`
    orders anything else as text, which no partition column holds: docs/language.md, E050)."""
    return order_of(value)[0] != _TEXT


_TEXT = 2  # the kind `order_of` gives a value that is neither an integer nor a date or timestamp


def evidence_digest(parts: Sequence[str]) -> str:
    """One digest over partitions' keys and evidence, alternating, in order: what the ledger's
    digest records. Joined by NUL, which neither holds (keys and evidence are file names, sizes and
    the text of dates and integers), so two sequences that differ give different text."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class LedgerEntry(NamedTuple):
    """A consumed partition as the ledger records it (a named tuple: thousands are read per run)."""

    key: str
    rows: int
    evidence: str
    entry: int
    row_hash_sum: str | None = None


def read_ledger(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, LedgerEntry] | None:
    """The source's current ledger (None when it was never started, or the warehouse predates ledgers)."""
    return _read_ledger(con, source) if has_history_table(con, "source_ledger") else None


def _read_ledger(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, LedgerEntry] | None:
    # One statement: the rows since the latest reset row (a never-started ledger has none at all).
    rows = con.execute(
        """WITH start AS (
               SELECT max(entry) AS entry FROM strata.source_ledger WHERE source = ? AND is_reset
           )
           SELECT partition_key, row_count, evidence, l.entry, row_hash_sum, is_reset
           FROM strata.source_ledger l, start
           WHERE l.source = ? AND l.entry >= start.entry
           ORDER BY l.entry, NOT is_reset""",
        [source, source],
    ).fetchall()
    if not rows:
        return None
    ledger: dict[str, LedgerEntry] = {}
    for key, count, evidence, entry, hash_sum, is_reset in rows:
        if is_reset:
            continue
        if evidence is None:  # expired: left the source by its retention
            ledger.pop(key, None)
        else:
            ledger[key] = LedgerEntry(key, count, evidence, entry, hash_sum)
    return ledger


class LedgerDigest(NamedTuple):
    """The ledger as a whole, as the run that last advanced it left it: one digest of its
    partitions' keys and evidence in order (engine.sources.business.evidence_digest) and their row
    counts in that order."""

    digest: str
    row_counts: tuple[int, ...]


def read_ledger_digest(con: duckdb.DuckDBPyConnection, source: str) -> LedgerDigest | None:
    """The digest of the source's current ledger; None when there is none, or when the ledger
    was advanced after it (then only its rows say what it holds)."""
    if not has_history_table(con, "source_ledger_digest"):
        return None
    row = con.execute(
        """SELECT digest, row_counts FROM strata.source_ledger_digest
           WHERE source = ? AND entry >= (SELECT max(entry) FROM strata.source_ledger WHERE source = ?)
           ORDER BY entry DESC LIMIT 1""",
        [source, source],
    ).fetchone()
    return None if row is None else LedgerDigest(str(row[0]), tuple(row[1]))


def write_ledger(
    con: duckdb.DuckDBPyConnection,
    entry: int,
    source: str,
    partitions: Sequence[PartitionEvidence],
    reset_reason: str | None,
    expired: Sequence[str] = (),
    digest: LedgerDigest | None = None,
) -> None:
    """Record the partitions a run consumed (after a reset row, when the ledger starts anew) and
    those that expired (a row without evidence); and `digest`, the ledger after them."""
    if digest is not None:
        con.execute(
            "INSERT INTO strata.source_ledger_digest VALUES (?, ?, ?, ?)",
            [entry, source, digest.digest, list(digest.row_counts)],
        )
    rows: list[tuple[object, ...]] = []
    if reset_reason is not None:
        rows.append((entry, source, None, None, reset_reason, True, None))
    rows.extend(
        (entry, source, item.key, item.rows, item.evidence, False, item.row_hash_sum) for item in partitions
    )
    rows.extend((entry, source, key, None, None, False, None) for key in expired)
    if rows:
        con.executemany("INSERT INTO strata.source_ledger VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
