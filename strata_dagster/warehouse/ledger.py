"""Partition ledgers of business-versioned sources: which partitions were consumed, and cheap
evidence of what each held (seed 004).

Evidence never reads a row: for files, each file's name, size and the row count its Parquet footer
records (the folder `col=value/` is the partition); for a table, each partition's row count and the
range of its partition column, read from that one column. The ledger lives in the history schema,
append-only: a run adds the partitions it consumed, and a reset row starts a new ledger (a first
read, a full refresh, or a rebuild after a broken assumption).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import glob
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import duckdb
from sqlglot import exp

from strata_dagster.warehouse.sql import data_type, run

LEDGER_TABLE = "strata.source_ledger"


@dataclass(frozen=True)
class PartitionEvidence:
    """One partition of a source as listed now: its key (the partition value as text), its row
    count, the evidence of its content, its files (file sources) and whether it may be consumed."""

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


def hive_value(path: str, column: str) -> str | None:
    """The value of `column=value` in a file's folders (the innermost one if repeated)."""
    for part in reversed(path.split("/")[:-1]):
        name, sep, value = part.partition("=")
        if sep and name == column:
            return value
    return None


def list_file_partitions(
    con: duckdb.DuckDBPyConnection, pattern: str, column: str, marker: str | None
) -> tuple[list[PartitionEvidence], list[str]]:
    """The partitions of the Parquet files `pattern` matches, by their `column=value` folder, with
    each file's name and size (a stat, no file opened; row counts are UNCOUNTED until
    `with_footer_rows`); and the files that sit in no such folder."""
    files = matching_files(pattern)
    by_key: dict[str, list[str]] = defaultdict(list)
    stray: list[str] = []
    for file in files:
        value = hive_value(file, column)
        if value is None:
            stray.append(file)
        else:
            by_key[value].append(file)
    partitions = []
    for key, members in by_key.items():
        members.sort()
        evidence = ";".join(f"{os.path.basename(file)}:{os.stat(file).st_size}" for file in members)
        folder = os.path.dirname(members[0])
        is_complete = marker is None or os.path.exists(os.path.join(folder, marker))
        partitions.append(PartitionEvidence(key, UNCOUNTED, evidence, tuple(members), is_complete))
    partitions.sort(key=lambda item: order_of(item.key))
    return partitions, stray


UNCOUNTED = -1


def matching_files(pattern: str) -> list[str]:
    """The files `pattern` matches, sorted. Python's glob matches `*` within one folder level as
    DuckDB's does; the usual `folder/*/*.parquet` is listed with one scandir per partition folder,
    which spares glob's per-entry overhead on thousands of folders (same matches: names starting
    with a dot are skipped, as glob skips them)."""
    root, middle, name = pattern.rsplit("/", 2) if pattern.count("/") >= 2 else ("", "", "")
    if middle != "*" or not root or glob.has_magic(root) or name.startswith("."):
        return sorted(glob.glob(pattern))
    is_match = re.compile(fnmatch.translate(name)).match
    files: list[str] = []
    try:
        folders = [entry for entry in os.scandir(root) if not entry.name.startswith(".") and entry.is_dir()]
    except OSError:  # glob lists nothing it cannot read
        return []
    for folder in folders:
        try:
            with os.scandir(folder.path) as entries:
                files.extend(
                    entry.path for entry in entries if not entry.name.startswith(".") and is_match(entry.name)
                )
        except OSError:
            continue
    return sorted(files)


def with_footer_rows(
    con: duckdb.DuckDBPyConnection, partitions: Sequence[PartitionEvidence]
) -> list[PartitionEvidence]:
    """File partitions with their row counts, from their Parquet footers (no row read): taken for the
    partitions a run consumes; a consumed one keeps the count the ledger recorded."""
    files = [file for item in partitions for file in item.files]
    if not files:
        return [replace(item, rows=0) for item in partitions]
    listing = exp.Array(expressions=[exp.Literal.string(file) for file in files])
    query = exp.select("file_name", "num_rows").from_(
        exp.Anonymous(this="parquet_file_metadata", expressions=[listing])
    )
    rows = {str(name): int(count) for name, count in run(con, query).fetchall()}
    return [replace(item, rows=sum(rows.get(file, 0) for file in item.files)) for item in partitions]


def list_table_partitions(
    con: duckdb.DuckDBPyConnection, relation: exp.Table, key: exp.Expression, column: str
) -> list[PartitionEvidence]:
    """Each partition's row count and the range of its partition column, from that column alone."""
    value = exp.column(column)
    query = (
        exp.select(
            exp.cast(key.copy(), data_type("VARCHAR")).as_("__key"),
            exp.func("count_star"),
            exp.cast(exp.func("min", value), data_type("VARCHAR")),
            exp.cast(exp.func("max", value.copy()), data_type("VARCHAR")),
        )
        .from_(relation.copy())
        .where(exp.not_(exp.Is(this=value.copy(), expression=exp.null())))
        .group_by(exp.Literal.number(1))
    )
    partitions = [
        PartitionEvidence(str(name), int(rows), f"rows={rows} min={low} max={high}")
        for name, rows, low, high in run(con, query).fetchall()
    ]
    partitions.sort(key=lambda item: order_of(item.key))
    return partitions


@dataclass(frozen=True)
class LedgerEntry:
    """A consumed partition as the ledger records it."""

    key: str
    rows: int
    evidence: str
    entry: int
    row_hash_sum: str | None = None


def read_ledger(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, LedgerEntry] | None:
    """The source's current ledger (None when it was never started, or the warehouse predates ledgers)."""
    try:
        return _read_ledger(con, source)
    except duckdb.CatalogException:
        return None


def _read_ledger(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, LedgerEntry] | None:
    rows = con.execute(
        """WITH start AS (
               SELECT max(entry) AS entry FROM strata.source_ledger WHERE source = ? AND is_reset
           )
           SELECT partition_key, row_count, evidence, l.entry, row_hash_sum
           FROM strata.source_ledger l, start
           WHERE l.source = ? AND NOT l.is_reset AND l.entry >= start.entry
           ORDER BY l.entry""",
        [source, source],
    ).fetchall()
    started = con.execute(
        "SELECT count(*) FROM strata.source_ledger WHERE source = ? AND is_reset", [source]
    ).fetchone()
    if not started or not started[0]:
        return None
    ledger: dict[str, LedgerEntry] = {}
    for key, count, evidence, entry, hash_sum in rows:
        if evidence is None:  # expired: left the source by its retention
            ledger.pop(str(key), None)
        else:
            ledger[str(key)] = LedgerEntry(str(key), int(count), str(evidence), int(entry), hash_sum)
    return ledger


def write_ledger(
    con: duckdb.DuckDBPyConnection,
    entry: int,
    source: str,
    partitions: Sequence[PartitionEvidence],
    reset_reason: str | None,
    expired: Sequence[str] = (),
) -> None:
    """Record the partitions a run consumed (after a reset row, when the ledger starts anew) and
    those that expired (a row without evidence)."""
    rows: list[tuple[object, ...]] = []
    if reset_reason is not None:
        rows.append((entry, source, None, None, reset_reason, True, None))
    rows.extend(
        (entry, source, item.key, item.rows, item.evidence, False, item.row_hash_sum) for item in partitions
    )
    rows.extend((entry, source, key, None, None, False, None) for key in expired)
    if rows:
        con.executemany("INSERT INTO strata.source_ledger VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def ledger_history(con: duckdb.DuckDBPyConnection, entry: int) -> dict[str, tuple[str | None, int]]:
    """Per business-versioned source an entry consumed: its last consumed partition (its version)
    and how many partitions its ledger held then."""
    rows = con.execute(
        """WITH starts AS (
               SELECT source, max(entry) AS entry FROM strata.source_ledger
               WHERE is_reset AND entry <= ? GROUP BY source
           )
           SELECT l.source, list(l.partition_key) FILTER (WHERE NOT l.is_reset AND l.evidence IS NOT NULL)
           FROM strata.source_ledger l JOIN starts s ON l.source = s.source AND l.entry >= s.entry
           WHERE l.entry <= ?
           GROUP BY l.source""",
        [entry, entry],
    ).fetchall()
    result: dict[str, tuple[str | None, int]] = {}
    for source, keys in rows:
        keys = sorted(set(keys or []), key=order_of)
        result[str(source)] = (keys[-1] if keys else None, len(keys))
    return result
