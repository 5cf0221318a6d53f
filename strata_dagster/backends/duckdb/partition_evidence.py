"""The partitions of a business-versioned source as listed now, with cheap evidence of what each
holds (state/ledger.py records the partitions consumed).

Evidence never reads a row: for files, each file's name, size and the row count its Parquet footer
records (the folder `col=value/` is the partition); for a table, each partition's row count and the
range of its partition column, read from that one column.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import hashlib
import itertools
import os
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb import listing
from strata_dagster.backends.duckdb.connection import is_interruption
from strata_dagster.backends.sql.runner import run
from strata_dagster.errors import first_line
from strata_dagster.state.ledger import UNCOUNTED, PartitionEvidence, evidence_digest, is_key, order_of


def by_partition_value(
    groups: dict[str | None, tuple[int, str]],
) -> dict[tuple[int, object], tuple[int, str]]:
    """Figures keyed by a partition value's text (as DuckDB prints it), keyed by the value itself
    (`order_of`): a folder `hour=2026-11-29 13:00/` holds the value DuckDB prints
    `2026-11-29 13:00:00`. NULL belongs to no partition."""
    return {order_of(key): figures for key, figures in groups.items() if key is not None}


def hive_value(path: str, column: str) -> str | None:
    """The value of `column=value` in a file's folders (the innermost one if repeated)."""
    for part in reversed(path.split("/")[:-1]):
        name, sep, value = part.partition("=")
        if sep and name == column:
            return value
    return None


def list_file_partitions(
    pattern: str,
    column: str,
    marker: str | None,
    cache_dir: Path | None = None,
    found: listing.FolderListing | None = None,
) -> tuple[list[PartitionEvidence], list[str]]:
    """The partitions of the Parquet files `pattern` matches, by their `column=value` folder, with
    each file's name and size (a stat, no file opened; row counts are UNCOUNTED until
    `with_footer_rows`); and the files that sit in no such folder. `cache_dir`: where the names in
    each folder are cached by the folder's stat (backends.duckdb.listing; every file is stat'ed anyway).
    `found`: the pattern's folders, listed already (`file_listing`)."""
    by_key: dict[str, list[tuple[str, int, bool]]] = defaultdict(list)
    stray: list[str] = []
    partitions = []
    prefix = f"{column}="
    skip = len(prefix)
    for path, name, folder_files, has_marker, files in _listed(pattern, marker, cache_dir, found):
        if name.startswith(prefix) and folder_files:
            # One partition folder under the root: its files' names and sizes are the evidence.
            evidence = _evidence([file for file, _ in folder_files], [size for _, size in folder_files])
            partitions.append(
                PartitionEvidence(name[skip:], UNCOUNTED, evidence, files, marker is None or has_marker)
            )
            continue
        for file, size in folder_files:
            file_path = f"{path}/{file}" if path else file
            value = hive_value(file_path, column)
            if value is None:
                stray.append(file_path)
            else:
                by_key[value].append((file_path, size, has_marker))
    for key, members in by_key.items():
        members.sort()
        evidence = ";".join(f"{path.rpartition('/')[2]}:{size}" for path, size, _ in members)
        is_complete = marker is None or members[0][2]
        files = tuple(path for path, _, _ in members)
        partitions.append(PartitionEvidence(key, UNCOUNTED, evidence, files, is_complete))
    partitions.sort(key=lambda item: order_of(item.key))
    stray.sort()
    return partitions, stray


class UnreadableFile(Exception):
    """A source file DuckDB cannot read (truncated, not Parquet, not permitted): its path, and the
    first line of DuckDB's message."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _evidence(names: Sequence[str], sizes: Sequence[int]) -> str:
    """A partition folder's evidence: its files' names and sizes, in the order of the names."""
    if len(names) == 1:
        return f"{names[0]}:{sizes[0]}"
    return ";".join([f"{name}:{size}" for name, size in zip(names, sizes, strict=True)])


def file_listing(
    pattern: str, marker: str | None, cache_dir: Path | None, column: str | None = None
) -> listing.FolderListing | None:
    """The folders of a `root/*/<name>` pattern (backends.duckdb.listing); None for another layout. With
    the partition `column`, the listing's summary is its `listing_digest` in key order (kept in the
    listing's cache with the listing it digests: an unchanged listing is not digested again)."""
    parts = listing.split_pattern(pattern)
    if parts is None:
        return None
    summarize = None
    if column is not None:
        summarize = (f"evidence_digest of {column}", functools.partial(_key_order_digest, column=column))
    return listing.scan_folders(*parts, marker, cache_dir, summarize)


def _key_order_digest(found: listing.FolderListing, column: str) -> str | None:
    return listing_digest(in_key_order(found, column), column)


def listing_digest(found: listing.FolderListing, column: str) -> str | None:
    """`evidence_digest` of a listing's folders as partitions, in the order of the folders' names,
    from the listing's lists alone (no partition built); None when a folder is not `column=value`
    (its files are read another way, or are strays)."""
    prefix = f"{column}="
    if not all(map(str.startswith, found.folders, itertools.repeat(prefix))):
        return None
    skip = len(prefix)
    if max(map(len, found.names), default=0) == 1:  # the usual folders of one file each
        text = "\0".join(
            [
                f"{folder[skip:]}\0{names[0]}:{sizes[0]}"
                for folder, names, sizes in zip(found.folders, found.names, found.sizes, strict=True)
            ]
        )
        return hashlib.sha256(text.encode()).hexdigest()
    evidence = map(_evidence, found.names, found.sizes)
    keys = [folder[skip:] for folder in found.folders]
    return evidence_digest([part for pair in zip(keys, evidence, strict=True) for part in pair])


def in_key_order(found: listing.FolderListing, column: str) -> listing.FolderListing:
    """The listing with its folders in the order of their partition keys (`order_of`). Folder names
    of one width (dates, timestamps of one precision, integers of as many digits) sort so already;
    other widths (integers `9` and `10`) are sorted. Only speed rests on this: a listing in another
    order has another digest than the ledger's, and is then compared partition by partition."""
    if len(set(map(len, found.folders))) <= 1:
        return found
    skip = len(column) + 1
    order = sorted(range(len(found.folders)), key=lambda index: order_of(found.folders[index][skip:]))
    return listing.FolderListing(
        found.root,
        [found.folders[index] for index in order],
        [found.names[index] for index in order],
        [found.sizes[index] for index in order],
        [found.markers[index] for index in order],
    )


def listed_partitions(
    found: listing.FolderListing, column: str, marker: str | None, row_counts: Sequence[int]
) -> tuple[PartitionEvidence, ...]:
    """A listing's folders as partitions, in the folders' order, with the row counts given (a
    ledger's: the listing is the one its digest records)."""
    skip = len(column) + 1
    return tuple(
        PartitionEvidence(
            folder[skip:],
            rows,
            _evidence(names, sizes),
            found.paths(index),
            marker is None or has_marker,
        )
        for index, (folder, names, sizes, has_marker, rows) in enumerate(
            zip(found.folders, found.names, found.sizes, found.markers, row_counts, strict=True)
        )
    )


def _listed(
    pattern: str, marker: str | None, cache_dir: Path | None, found: listing.FolderListing | None = None
) -> list[tuple[str, str, tuple[tuple[str, int], ...], bool, tuple[str, ...]]]:
    """(folder, its name, its matching files with their sizes, whether it holds `marker`, the
    files' paths) for the files `pattern` matches; a folder of "" holds files of other layouts,
    named by their whole path."""
    if found is None:
        found = file_listing(pattern, marker, cache_dir)
    if found is not None:
        return [
            (
                f"{found.root}/{folder}",
                folder,
                tuple(zip(names, sizes, strict=True)),
                has_marker,
                found.paths(index),
            )
            for index, (folder, names, sizes, has_marker) in enumerate(
                zip(found.folders, found.names, found.sizes, found.markers, strict=True)
            )
        ]
    listed: list[tuple[str, str, tuple[tuple[str, int], ...], bool, tuple[str, ...]]] = []
    for path in matching_files(pattern):
        folder = os.path.dirname(path)
        has_marker = marker is not None and os.path.exists(os.path.join(folder, marker))
        listed.append(("", "", ((path, os.stat(path).st_size),), has_marker, (path,)))
    return listed


def listing_cache_dir(database_path: str | None) -> Path | None:
    """Where the listings of a warehouse's sources are cached: `<warehouse file>.listing/` (None
    for an in-memory database)."""
    return Path(database_path + listing.CACHE_SUFFIX) if database_path else None


def first_matching_file(pattern: str, column: str | None = None, marker: str | None = None) -> str | None:
    """One file `pattern` matches, found without listing every partition folder (a schema is read
    from one file): the first found in a folder that is a partition, `column=value/` whose value is
    a key (`is_key`), holding `marker` when one is given; else the first found at all. A folder
    `dt=garbage/` or one still being written is not where a source's schema is read (DuckDB types
    the hive column from that one path), when any other folder can say it."""
    parts = listing.split_pattern(pattern)
    if parts is None:
        return next(glob.iglob(pattern), None)
    root, name = parts
    is_match = re.compile(fnmatch.translate(name)).match
    prefix = None if column is None else f"{column}="
    fallback = None
    try:
        with os.scandir(root) as folders:
            for folder in folders:
                if folder.name.startswith(".") or not folder.is_dir():
                    continue
                try:
                    with os.scandir(folder.path) as entries:
                        names = [entry.name for entry in entries]
                except OSError:
                    continue
                found = min((n for n in names if not n.startswith(".") and is_match(n)), default=None)
                if found is None:
                    continue
                path = f"{folder.path}/{found}"
                is_partition = prefix is None or (
                    folder.name.startswith(prefix) and is_key(folder.name[len(prefix) :])
                )
                if is_partition and (marker is None or marker in names):
                    return path
                fallback = fallback or path
    except OSError:
        return fallback
    return fallback


def matching_files(pattern: str) -> list[str]:
    """The files `pattern` matches, sorted. Python's glob matches `*` within one folder level as
    DuckDB's does; the usual `folder/*/*.parquet` is listed with one scandir per partition folder,
    which spares glob's per-entry overhead on thousands of folders (same matches: names starting
    with a dot are skipped, as glob skips them)."""
    parts = listing.split_pattern(pattern)
    if parts is None:
        return sorted(glob.glob(pattern))
    return sorted(
        f"{item.path}/{file}" for item in listing.list_folders(*parts, None) for file, _ in item.files
    )


def with_footer_rows(
    con: duckdb.DuckDBPyConnection, partitions: Sequence[PartitionEvidence]
) -> list[PartitionEvidence]:
    """File partitions with their row counts, from their Parquet footers (no row read): taken for the
    partitions a run consumes; a consumed one keeps the count the ledger recorded."""
    files = [file for item in partitions for file in item.files]
    if not files:
        return [item._replace(rows=0) for item in partitions]
    try:
        found = run(con, _footers_query(files)).fetchall()
    except duckdb.Error as error:
        if is_interruption(error):
            raise KeyboardInterrupt from None
        unreadable = _first_unreadable(con, files, _footers_query)
        if unreadable is None:
            raise  # each file reads alone: not a file's fault
        raise unreadable from None
    rows = {str(name): int(count) for name, count in found}
    return [item._replace(rows=sum(rows.get(file, 0) for file in item.files)) for item in partitions]


def _footers_query(files: Sequence[str]) -> exp.Select:
    listing = exp.Array(expressions=[exp.Literal.string(file) for file in files])
    return exp.select("file_name", "num_rows").from_(
        exp.Anonymous(this="parquet_file_metadata", expressions=[listing])
    )


def lacking_columns(
    con: duckdb.DuckDBPyConnection, files: Sequence[str], columns: Sequence[str]
) -> tuple[str, tuple[str, ...]] | None:
    """The first of `files` (readable ones: `with_footer_rows` read them) whose top-level columns
    lack some of `columns` (compared as DuckDB binds names, without case), with those it lacks;
    None when each has them all. From the files' Parquet schemas: no row is read."""
    if not files or not columns:
        return None
    listing = exp.Array(expressions=[exp.Literal.string(file) for file in files])
    query = exp.select("file_name", "name", "num_children").from_(
        exp.Anonymous(this="parquet_schema", expressions=[listing])
    )
    names: dict[str, list[str]] = defaultdict(list)
    remaining: dict[str, list[int]] = {}  # per file: the children still to come at each depth
    for file, name, children in run(con, query).fetchall():
        stack = remaining.get(file)
        if stack is None:  # the file's root: its children are the top-level columns
            remaining[file] = [int(children or 0)]
            continue
        while stack and stack[-1] == 0:
            stack.pop()
        if not stack:
            continue
        if len(stack) == 1:
            names[file].append(str(name).lower())
        stack[-1] -= 1
        if children:
            stack.append(int(children))
    for file in files:
        has = set(names.get(file, ()))
        lacked = tuple(column for column in columns if column.lower() not in has)
        if lacked:
            return file, lacked
    return None


def _rows_query(files: Sequence[str]) -> exp.Select:
    """Every value of every row of the files (hashed, so that no column is left unread)."""
    (file,) = files
    reader = exp.Anonymous(this="read_parquet", expressions=[exp.Literal.string(file)])
    return exp.select(exp.func("count", exp.func("hash", exp.column("t")))).from_(
        exp.Table(this=reader, alias=exp.TableAlias(this=exp.to_identifier("t")))
    )


def first_unreadable_file(con: duckdb.DuckDBPyConnection, files: Sequence[str]) -> UnreadableFile | None:
    """The first of `files` some row of which cannot be read (a file whose footer reads but whose
    pages do not: a torn write, a damaged disk), each read alone; None when each reads whole."""
    return _first_unreadable(con, files, _rows_query)


def _first_unreadable(
    con: duckdb.DuckDBPyConnection, files: Sequence[str], query: Callable[[Sequence[str]], exp.Select]
) -> UnreadableFile | None:
    """The first of `files` that `query` cannot read alone (read one by one once reading them
    together failed, on a cursor of its own: the failure aborted `con`'s transaction); None when
    each reads alone."""
    cursor = con.cursor()
    try:
        for file in files:
            try:
                run(cursor, query([file])).fetchall()
            except duckdb.Error as error:
                if is_interruption(error):
                    raise KeyboardInterrupt from None
                return UnreadableFile(file, first_line(error))
    finally:
        cursor.close()
    return None
