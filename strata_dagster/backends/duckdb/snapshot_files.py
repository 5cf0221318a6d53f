"""Snapshots stored as Parquet files: written once beside the warehouse, read through a view.

A snapshot `strata_snapshots.<name>` is a view over one immutable file,
`<warehouse>.snapshots/<name>.<token>.parquet`. The file is written before the view: `COPY (query)
TO` a temporary name, fsync, rename, fsync of the folder. The view is created in the writer's
transaction, so the file is published when that transaction commits and never otherwise; a file
no committed view reads is garbage (the session that wrote it removes it on closing, `strata gc`
removes what a crash left). A file is never rewritten: a rebuild under the same name gets a new
token. The serving copy (serving.py) reads the same files, so nothing is copied for readers.

Parquet does not keep every DuckDB type. A 128-bit integer travels as its two 64-bit halves,
other scalars it would change travel as text or are cast back on reading (`write_query`,
`read_relation`); a snapshot with a nested column of such a type, or whose view does not give back
exactly the query's types, is stored as a table instead.

`STRATA_SNAPSHOT_STORAGE=table` stores every new snapshot as a table in the warehouse file, as
before issue 19's second part: a warehouse that stays one file, for the price of the serving copy
exporting each snapshot once more.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import FileDamage
from strata_dagster.backends.iceberg.catalog import is_enabled as publishes_to_iceberg
from strata_dagster.backends.sql.runner import describe, run
from strata_dagster.backends.sql.snapshot_kinds import SnapshotKinds
from strata_dagster.backends.sql.tables import drop_table
from strata_dagster.errors import E_SNAPSHOT_STORAGE, StrataError
from strata_dagster.paths import fsync
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, data_type, render, snapshot_table
from strata_dagster.state.detail_files import SNAPSHOTS_SUFFIX

FOLDER_SUFFIX = SNAPSHOTS_SUFFIX  # the folder detail files are kept in too (state/detail_files.py)
# A temporary view: the query of a snapshot being written, bound once.
_PENDING = exp.Table(this=exp.to_identifier("__strata_pending_snapshot"))
STORAGE_ENV = "STRATA_SNAPSHOT_STORAGE"
STORAGES = ("parquet", "table")
# Types Parquet would change in value (128-bit integers become doubles, an INTERVAL loses its
# microseconds, a TIME WITH TIME ZONE its offset) or cannot hold: exact as text, cast back.
_AS_TEXT = ("HUGEINT", "UHUGEINT", "INTERVAL", "TIME WITH TIME ZONE", "BIT", "BIGNUM", "VARINT")
# 128-bit integers (a `sum` of integers, a figures table's hash sums) as a struct of their high
# and low 64 bits instead: at 10M rows DuckDB writes it 7x faster than text and reads it 10x
# faster. The type of each half, by the integer's.
_HALVES = {"HUGEINT": "BIGINT", "UHUGEINT": "UBIGINT"}
_HIGH, _LOW = "hi", "lo"
_TWO_TO_64 = 2**64
# Types that come back from Parquet as another type with the same values (read back, then cast).
_CAST_BACK = ("TIMESTAMP_S", "TIMESTAMP_MS")
_FILE_IN_VIEW = re.compile(r"read_parquet\('((?:[^']|'')*)'\)")


def parquet_version() -> str:
    """The Parquet format files are written in. Version 2 (delta encodings): on 10M rows DuckDB
    writes it 15% faster, reads it 40% faster, and the file is 44% smaller. Spark's Iceberg
    runtime read no delta encoding before 2026, and a warehouse publishing to Iceberg registers
    its files as they are, so it writes version 1."""
    return "V1" if publishes_to_iceberg() else "V2"


def folder_of(warehouse: Path) -> Path:
    return warehouse.with_name(warehouse.name + FOLDER_SUFFIX)


def storage() -> str:
    raw = os.environ.get(STORAGE_ENV, "parquet")
    if raw not in STORAGES:
        raise StrataError(
            E_SNAPSHOT_STORAGE,
            f"{STORAGE_ENV}={raw!r} is not a snapshot storage",
            hint=f"use {STORAGE_ENV}=parquet (the default: files beside the warehouse) or "
            f"{STORAGE_ENV}=table (tables inside the warehouse file)",
        )
    return raw


# -- types ----------------------------------------------------------------------------------------
def _holds_inexact(type_name: str) -> bool:
    return any(name in type_name for name in _AS_TEXT)


def travels_as_halves(type_name: str) -> bool:
    return type_name in _HALVES


def travels_as_text(type_name: str) -> bool:
    return _holds_inexact(type_name) and not travels_as_halves(type_name)


def comes_back_changed(type_name: str) -> bool:
    return (
        _holds_inexact(type_name)
        or type_name in _CAST_BACK
        or any(name in type_name for name in _CAST_BACK)
        or "ENUM(" in type_name
        or "UNION(" in type_name  # comes back as a STRUCT of its tag and members
        or re.search(r"\[\d+\]", type_name) is not None
    )


# Types a file gives back exactly as they are (checked by test_snapshot_files): a snapshot of only
# these needs no check that its view gives the columns back.
_KNOWN_EXACT = frozenset(
    {
        "BOOLEAN",
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "FLOAT",
        "DOUBLE",
        "VARCHAR",
        "BLOB",
        "DATE",
        "TIME",
        "TIMESTAMP",
        "TIMESTAMP_NS",
        "TIMESTAMP WITH TIME ZONE",
        "UUID",
        "JSON",
        "HUGEINT",
        "UHUGEINT",
        "INTERVAL",
        "TIME WITH TIME ZONE",
        "TIMESTAMP_S",
        "TIMESTAMP_MS",
    }
)


def is_known_exact(columns: Iterable[tuple[str, str]]) -> bool:
    return all(type_name in _KNOWN_EXACT or type_name.startswith("DECIMAL(") for _, type_name in columns)


def _is_nested(type_name: str) -> bool:
    return "(" in type_name and not type_name.startswith(("DECIMAL(", "ENUM(")) or "[" in type_name


def is_storable(columns: Iterable[tuple[str, str]]) -> bool:
    """Whether a file keeps every column exactly: a nested type holding one of the types that
    travel as text would come back through a text cast of the whole value (quoting included), so
    such a snapshot stays a table; so does a UNION (Parquet gives back a STRUCT)."""
    return not any(
        (_is_nested(type_name) and _holds_inexact(type_name)) or "UNION(" in type_name
        for _, type_name in columns
    )


def _replaced(columns: Iterable[tuple[str, str]], value: Callable[[str, str], exp.Expr | None]) -> exp.Star:
    """`*` with each column for which `value(column, type)` gives an expression replaced by it."""
    replace = [
        replaced.as_(column)
        for column, type_name in columns
        if (replaced := value(column, type_name)) is not None
    ]
    return exp.Star(replace=replace or None)


def _as_stored(column: str, type_name: str) -> exp.Expr | None:
    if travels_as_halves(type_name):
        half = data_type(_HALVES[type_name])
        high = exp.BitwiseRightShift(this=exp.column(column), expression=exp.Literal.number(64))
        low = exp.BitwiseAnd(this=exp.column(column), expression=_whole(_TWO_TO_64 - 1, type_name))
        return exp.Struct(
            expressions=[
                exp.PropertyEQ(this=exp.to_identifier(_HIGH), expression=exp.cast(high, half)),
                exp.PropertyEQ(this=exp.to_identifier(_LOW), expression=exp.cast(low, data_type("UBIGINT"))),
            ]
        )
    if travels_as_text(type_name):
        return exp.cast(exp.column(column), data_type("VARCHAR"))
    return None


def _whole(value: int, type_name: str) -> exp.Expr:
    """`value` as the 128-bit integer type `type_name` (a literal too wide for a BIGINT)."""
    return exp.cast(exp.Literal.string(str(value)), data_type(type_name))


def _from_halves(column: str, type_name: str) -> exp.Expr:
    """The 128-bit integer a struct of halves holds: high * 2^64 + low (a shift refuses a
    negative high half)."""
    whole = data_type(type_name)

    def half(name: str) -> exp.Expr:
        return exp.cast(
            exp.func("struct_extract", exp.column(column), exp.Literal.string(name)), whole.copy()
        )

    scale = _whole(_TWO_TO_64, type_name)
    return exp.Add(this=exp.Mul(this=half(_HIGH), expression=scale), expression=half(_LOW))


def write_query(relation: exp.Table | exp.Query, columns: list[tuple[str, str]]) -> exp.Query:
    """`relation`'s rows as a file should hold them (128-bit integers as halves, the other types
    that Parquet would change as text)."""
    if not any(travels_as_halves(type_name) or travels_as_text(type_name) for _, type_name in columns):
        return relation if isinstance(relation, exp.Query) else exp.select("*").from_(relation)
    source = relation.subquery("__rows") if isinstance(relation, exp.Query) else relation
    return exp.select(_replaced(columns, _as_stored)).from_(source)


def read_relation(
    path: Path, alias: str, columns: list[tuple[str, str]], stored: dict[str, str] | None = None
) -> exp.Table | exp.Subquery:
    """A file written by `write_query` as a relation named `alias`, with the columns' own types.
    `stored`: the file's own column types, for a file that may have been written otherwise (a
    128-bit integer as text, before halves); None: as `write_query` writes today. A relative
    `path` is kept relative: a serving catalog's, found through `file_search_path`."""
    files = exp.Table(this=exp.func("read_parquet", exp.Literal.string(str(path))))
    if not any(comes_back_changed(type_name) for _, type_name in columns):
        files.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        return files

    def typed(column: str, type_name: str) -> exp.Expr | None:
        if not comes_back_changed(type_name):
            return None
        in_file = (stored or {}).get(column)
        if travels_as_halves(type_name) and (in_file is None or in_file.startswith("STRUCT(")):
            return _from_halves(column, type_name)
        return exp.cast(exp.column(column), data_type(type_name))

    return exp.select(_replaced(columns, typed)).from_(files).subquery(alias)


def read_query(path: Path, columns: list[tuple[str, str]], stored: dict[str, str] | None = None) -> exp.Query:
    """The query of a snapshot's view over its file (`stored`: as for `read_relation`)."""
    return exp.select("*").from_(read_relation(path, "__file", columns, stored))


def stored_types(
    con: duckdb.DuckDBPyConnection, path: Path, columns: list[tuple[str, str]]
) -> dict[str, str] | None:
    """The column types of the file at `path` as written, when how it holds `columns` depends on
    when it was written (a 128-bit integer: as text before halves); else None (no need to look)."""
    if not any(travels_as_halves(type_name) for _, type_name in columns):
        return None
    return dict(
        describe(
            con,
            exp.select("*").from_(exp.Table(this=exp.func("read_parquet", exp.Literal.string(str(path))))),
        )
    )


# -- files ----------------------------------------------------------------------------------------
def copy_to_file(con: duckdb.DuckDBPyConnection, path: Path, query: exp.Query, *, sync: bool = True) -> None:
    """Write `query`'s rows to `path` (consumed); a crash leaves only a temporary name behind.
    Without `sync` the file is not yet durable: SnapshotFiles.sync must run before anything that
    reads it is committed."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    copy = exp.Copy(
        this=query.subquery(),
        kind=False,
        files=[exp.Literal.string(str(staging))],
        params=[
            exp.CopyParameter(this=exp.var("FORMAT"), expression=exp.var("parquet")),
            exp.CopyParameter(this=exp.var("PARQUET_VERSION"), expression=exp.var(parquet_version())),
        ],
    )
    run(con, copy, consume=True)
    if sync:
        fsync(staging)
    os.replace(staging, path)
    if sync:
        fsync(path.parent)


def new_file(folder: Path, name: str) -> Path:
    """A name no file ever had: a file is written once and never replaced."""
    return folder / f"{name}.{secrets.token_hex(6)}.parquet"


def with_file(view_sql: str, path: str) -> str:
    """A snapshot view's stored SQL reading `path` instead of its file. Only the path's literal is
    replaced (rendered by sqlglot): the rest stays DuckDB's own text, which parsing and rendering
    would change and cost about 1.5 ms a view."""
    match = _FILE_IN_VIEW.search(view_sql)
    if match is None:
        return view_sql
    literal = render(exp.Literal.string(path))
    return view_sql[: match.start(1) - 1] + literal + view_sql[match.end(1) + 1 :]


def file_of(view_sql: str) -> str | None:
    """The file a snapshot view reads (its path as written), or None for a view over tables."""
    match = _FILE_IN_VIEW.search(view_sql)
    return match.group(1).replace("''", "'") if match else None


_MAGIC = b"PAR1"


def problem_of(path: Path) -> str | None:
    """Why the file at `path` cannot be read as a whole Parquet file, or None: it is missing, or
    lacks the magic bytes Parquet starts and ends with, or the footer its last bytes announce (a
    copy cut short, bytes written over it). Reads 8 bytes at each end, never the rows."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
            size = os.fstat(file.fileno()).st_size
            if size < 12 or head != _MAGIC:
                return "not a Parquet file (cut short or overwritten)"
            file.seek(size - 8)
            tail = file.read(8)
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return f"unreadable ({error.strerror or type(error).__name__})"
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] != _MAGIC or footer + 12 > size:
        return "not a whole Parquet file (cut short or overwritten)"
    return None


def views_over_files(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every snapshot view that reads a file: name -> its stored SQL (one catalog query; DuckDB
    writes each view's SQL out for it, about 10 µs a view)."""
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database() "
        "AND contains(sql, 'read_parquet(')",
        [SNAPSHOT_SCHEMA],
    ).fetchall()
    return {str(name): str(sql) for name, sql in rows}


class FileIndex:
    """The file each snapshot view reads, and whether it can be read (each file checked once)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self._names = sorted(paths)
        self._problems: dict[str, str | None] = {}

    @classmethod
    def of(cls, views: dict[str, str]) -> FileIndex:
        return cls({name: Path(path) for name, sql in views.items() if (path := file_of(sql)) is not None})

    def damaged(self, tables: Iterable[str]) -> list[FileDamage]:
        """The files of `tables` that cannot be read, and of the snapshots named after them (a
        state's keys tables, a build's per-input figures: `<table>__...`), which its next builds read."""
        found = []
        for name in sorted({name for table in tables for name in self.with_companions(table)}):
            if name not in self._problems:
                self._problems[name] = problem_of(self.paths[name])
            problem = self._problems[name]
            if problem is not None:
                found.append(FileDamage(name, self.paths[name], problem))
        return found

    def with_companions(self, table: str) -> list[str]:
        """`table` (when it reads a file) and the snapshots named after it that read files."""
        prefix = f"{table}__"
        start = bisect.bisect_left(self._names, prefix)
        names = [table] if table in self.paths else []
        for name in self._names[start:]:
            if not name.startswith(prefix):
                break
            names.append(name)
        return names


@dataclass
class SnapshotFiles(SnapshotKinds):
    """Where one session writes snapshot files, and the files it wrote (to remove the unpublished).
    `folder` None: snapshots are tables (an in-memory database, or storage `table`). The kinds are
    forgotten when a transaction rolls back; asking DuckDB each time lists every view of the
    catalog: tens of ms with thousands."""

    written: list[Path] = field(default_factory=list)
    unsynced: list[Path] = field(default_factory=list)

    def kind_of(self, con: duckdb.DuckDBPyConnection, name: str) -> str | None:
        if self.kinds is None:
            rows = con.execute(
                "SELECT table_name, 'table' FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
                "UNION ALL SELECT view_name, 'view' FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database()",
                [SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA],
            ).fetchall()
            self.kinds = {str(row[0]): str(row[1]) for row in rows}
        return self.kinds.get(name)

    def write_snapshot(
        self, con: duckdb.DuckDBPyConnection, name: str, query: exp.Query, replaces: str | None
    ) -> None:
        """Snapshot `name` as a Parquet file in `folder` and a view over it, or a table when the file
        would not give the columns back exactly; `replaces`: the kind of a leftover of that name,
        dropped first. `query` is consumed."""
        temporary = exp.Properties(expressions=[exp.TemporaryProperty()])
        pending = exp.Create(this=_PENDING, kind="VIEW", expression=query, properties=temporary, replace=True)
        run(con, pending, consume=True)
        try:
            if replaces is not None:
                drop_table(con, name, self)
            columns = list(describe(con, _PENDING))
            if is_storable(columns) and self._write_file(con, name, columns):
                self.set_kind(name, "view")
            else:
                rows = exp.select("*").from_(_PENDING)
                run(con, exp.Create(this=snapshot_table(name), kind="TABLE", expression=rows))
                self.set_kind(name, "table")
        except BaseException:
            # The failed statement may have aborted the transaction (the view goes with it).
            with contextlib.suppress(duckdb.Error):
                run(con, exp.Drop(tables=[_PENDING], kind="VIEW", exists=True))
            raise
        run(con, exp.Drop(tables=[_PENDING], kind="VIEW", exists=True))

    def _write_file(self, con: duckdb.DuckDBPyConnection, name: str, columns: list[tuple[str, str]]) -> bool:
        """The pending rows as a file and the snapshot as a view over it; False (nothing left but an
        unreferenced file) when the view would not give back exactly the columns' types."""
        assert self.folder is not None
        self.folder.mkdir(exist_ok=True)
        path = new_file(self.folder, name)
        self.written.append(path)
        copy_to_file(con, path, write_query(_PENDING, columns), sync=False)
        self.unsynced.append(path)
        view = exp.Create(this=snapshot_table(name), kind="VIEW", expression=read_query(path, columns))
        run(con, view, consume=True)
        if is_known_exact(columns) or list(describe(con, snapshot_table(name))) == columns:
            return True
        run(con, exp.Drop(tables=[snapshot_table(name)], kind="VIEW", exists=True))
        return False

    def sync(self) -> None:
        """Make the files written since the last call durable, and their names (before a COMMIT
        publishes a view over them: the transaction's own fsync does not cover them). The
        fsyncs run side by side, so a build of many small partition files waits for the disk
        about once rather than once per file."""
        if not self.unsynced or self.folder is None:
            return
        paths, self.unsynced = self.unsynced, []
        if len(paths) == 1:
            fsync(paths[0])
        else:
            from concurrent.futures import ThreadPoolExecutor  # only to write files

            with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
                list(pool.map(fsync, paths))
        fsync(self.folder)

    @classmethod
    def of(cls, database_path: str | None) -> SnapshotFiles:
        """The snapshot files of the warehouse in file `database_path` (None: in memory)."""
        if storage() == "table" or not database_path:
            return cls(None)
        return cls(folder_of(Path(database_path).absolute()))


def referenced_files(
    con: duckdb.DuckDBPyConnection, folder: Path, among: Iterable[str] | None = None
) -> set[str]:
    """Names of the files in `folder` that a committed-or-pending snapshot view reads (of the names
    `among` only, when given: DuckDB then picks out the few views naming one, and only those are
    parsed here, however many snapshots the history holds)."""
    query = (
        "SELECT sql FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database() "
        "AND contains(sql, 'read_parquet(')"
    )
    params: list[object] = [SNAPSHOT_SCHEMA]
    if among is not None:
        query += (
            " AND EXISTS (SELECT 1 FROM unnest(?::VARCHAR[]) AS named(name) WHERE contains(sql, named.name))"
        )
        params.append(sorted(among))
    rows = con.execute(query, params).fetchall()
    names = set()
    here = str(folder)
    for (sql,) in rows:
        path = file_of(str(sql))
        if path is not None and os.path.dirname(path) == here:
            names.add(os.path.basename(path))
    return names


@dataclass(frozen=True)
class FilesRemoved:
    files: int
    bytes: int


def remove_unreferenced(
    con: duckdb.DuckDBPyConnection, folder: Path, kept: set[str], candidates: Iterable[Path] | None = None
) -> FilesRemoved:
    """Remove the files of `folder` no snapshot view reads and `kept` (names) does not list: the
    `candidates` only, or, with None, every file there and the staging files of cut-short writes.
    Only the warehouse's writer may call this (it holds the lock: no other process writes files)."""
    if not folder.is_dir():
        return FilesRemoved(0, 0)
    if candidates is None:
        paths = [Path(entry.path) for entry in os.scandir(folder) if entry.is_file()]
        referenced = referenced_files(con, folder) | kept
    else:
        paths = [path for path in candidates if path.exists()]
        referenced = (referenced_files(con, folder, [path.name for path in paths]) if paths else set()) | kept
    count = size = 0
    for path in paths:
        if path.name in referenced:
            continue
        size += path.stat().st_size
        path.unlink()
        count += 1
    return FilesRemoved(count, size)
