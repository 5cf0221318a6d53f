"""The serving copy: what readers open, so that no reader ever holds the writer's file.

DuckDB lets one process write a file and then no other process may open it, not even read-only;
a reader's shared lock in turn blocks the writer. So readers never open the warehouse. After each
write session that published a history entry, the writer writes a small catalog file holding the
same views, `<branch>.v_<model>`, over `read_parquet` of the snapshots' own files
(snapshot_files.py; a snapshot still stored as a table, or a view model's rows, is exported to
Parquet once), then switches a symlink to it with one rename. Readers ATTACH the symlink's path
read-only (`reader_statement`): they see one whole published state, the one that was live when
they attached, and never block or wait for the writer.

    <warehouse>.serving/live.duckdb -> catalog-<digest>.duckdb   (switched by os.replace)
    <warehouse>.serving/catalog-<digest>.duckdb, catalog-<digest>.json (the files it reads)
    <warehouse>.serving/data/<snapshot table>.parquet              (exports of tables and view models)

Every step leaves the previous catalog live until the rename: a crash before it leaves readers at
the previous whole state, and the next write session finds the catalog stale and writes it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import sqlglot
from sqlglot import exp

from strata_dagster.compile.relations import VIEW_PREFIX
from strata_dagster.errors import E_GC
from strata_dagster.warehouse.connection import seconds_from_env
from strata_dagster.warehouse.migrations import HISTORY_SCHEMA, SNAPSHOT_SCHEMA
from strata_dagster.warehouse.snapshot_files import copy_to_file, file_of, fsync, read_relation, write_query
from strata_dagster.warehouse.sql import DIALECT, describe, render, run, table

LIVE_NAME = "live.duckdb"
READER_CATALOG = "strata_live"  # the name readers attach the serving catalog under
STATE_SCHEMA = "strata_serving"
STATE_TABLE = "publication"  # one row: the history entry and digest the catalog serves
GRACE_ENV = "STRATA_SERVING_GRACE"
DEFAULT_GRACE = 3600.0  # seconds a retired catalog stays readable before gc removes it
# Steps after which a crash leaves the previous catalog live (crash tests, warehouse.faults).
SERVING_STEPS = ("serving_exported", "serving_catalog_written", "serving_switched")
_NEW_CATALOG = "__strata_serving_new"


def serving_dir(warehouse: Path) -> Path:
    return warehouse.with_name(warehouse.name + ".serving")


def live_path(warehouse: Path) -> Path:
    """The stable path readers attach: a symlink to the current catalog file."""
    return serving_dir(warehouse) / LIVE_NAME


def reader_statement(warehouse: Path) -> str:
    """The SQL a fresh DuckDB connection runs to read the live views under their usual names."""
    attach = exp.Attach(
        this=exp.alias_(exp.Literal.string(str(live_path(warehouse).absolute())), READER_CATALOG),
        expressions=[exp.AttachOption(this=exp.var("READ_ONLY"))],
    )
    use = exp.Use(this=exp.to_table(READER_CATALOG))
    return f"{render(attach)}; {render(use)};"


def is_served(warehouse: Path) -> bool:
    return live_path(warehouse).exists()


def served_view_count(warehouse: Path) -> int:
    """How many live views readers see now (0 when the serving copy does not exist)."""
    if not is_served(warehouse):
        return 0
    with open_live(warehouse) as con:
        row = con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE database_name = ? AND NOT internal AND schema_name <> ?",
            [READER_CATALOG, STATE_SCHEMA],
        ).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class ServingState:
    entry: int
    digest: str
    catalog: Path
    is_new: bool  # False: the live catalog already served this state
    exported_files: int
    exported_seconds: float


@dataclass(frozen=True)
class _ServedView:
    schema: str
    name: str
    query: exp.Query  # over read_parquet of serving files


def refresh(
    con: duckdb.DuckDBPyConnection, warehouse: Path, on_step: Callable[[str], None] = lambda step: None
) -> ServingState | None:
    """Make the serving catalog show what the warehouse's live views show now (the writer's
    connection, outside any transaction). None when nothing was ever published."""
    if not _has_publications(con):
        return None
    folder = serving_dir(warehouse)
    data = folder / "data"
    entry = _latest_entry(con)
    digest = _digest(folder, entry)
    catalog = folder / f"catalog-{digest}.duckdb"
    live = live_path(warehouse)
    if live.is_symlink() and os.readlink(live) == catalog.name and catalog.exists():
        return ServingState(entry, digest, catalog, False, 0, 0.0)
    kinds = _snapshot_kinds(con)
    views = [(schema, name, _parse_view(sql)) for schema, name, sql in _branch_views(con)]
    exports: dict[Path, exp.Query] = {}
    read_files: set[Path] = set()
    types = _Types(con)
    served = [
        _served_view(kinds, types, data, entry, schema, name, query, exports, read_files)
        for schema, name, query in views
    ]
    folder.mkdir(exist_ok=True)
    started = time.perf_counter()
    written = 0
    if exports:
        data.mkdir(exist_ok=True)
        written = sum(_export(con, path, query) for path, query in exports.items())
        fsync(data)
    exported_seconds = time.perf_counter() - started
    on_step("serving_exported")
    # The manifest first: gc finds every catalog file through its manifest.
    _write_manifest(catalog, sorted(path.name for path in exports), sorted(path.name for path in read_files))
    _write_catalog(con, catalog, served, entry, digest)
    on_step("serving_catalog_written")
    previous = os.readlink(live) if live.is_symlink() else None
    link = folder / f".{LIVE_NAME}.{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(catalog.name)
    os.replace(link, live)
    fsync(folder)
    if previous is not None and previous != catalog.name:
        _retire(folder / previous)
    on_step("serving_switched")
    return ServingState(entry, digest, catalog, True, written, exported_seconds)


def _has_publications(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = 'publications'",
        [HISTORY_SCHEMA],
    ).fetchone()
    return bool(row and row[0])


def _latest_entry(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT coalesce(max(entry), 0) FROM strata.entries").fetchone()
    return int(row[0]) if row else 0


def _branch_views(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """(schema, view, stored SQL) of every live view of every branch, in a stable order."""
    rows = con.execute(
        "SELECT schema_name, view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
        "AND NOT internal AND starts_with(view_name, ?) "
        "AND schema_name IN (SELECT DISTINCT branch FROM strata.publications) ORDER BY 1, 2",
        [VIEW_PREFIX],
    ).fetchall()
    return [(str(schema), str(name), str(sql)) for schema, name, sql in rows]


@dataclass(frozen=True)
class _Kind:
    """What a snapshot is: 'table', 'view' (a `materialize: view` model's) or 'file' (a view over
    its Parquet file, whose stored SQL is `sql`)."""

    kind: str
    sql: str = ""
    path: Path | None = None


def _snapshot_kinds(con: duckdb.DuckDBPyConnection) -> dict[str, _Kind]:
    rows = con.execute(
        "SELECT table_name, NULL FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
        "UNION ALL SELECT view_name, sql FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database()",
        [SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA],
    ).fetchall()
    kinds: dict[str, _Kind] = {}
    for name, sql in rows:
        if sql is None:
            kinds[str(name)] = _Kind("table")
            continue
        path = file_of(str(sql))
        kinds[str(name)] = _Kind("file", str(sql), Path(path)) if path is not None else _Kind("view")
    return kinds


class _Types:
    """(column, type) of a relation, described when first asked (one relation at a time:
    duckdb_columns() binds every view of the warehouse, each view over a file reading its footer)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.known: dict[tuple[str, str], list[tuple[str, str]]] = {}

    def of(self, schema: str, name: str) -> list[tuple[str, str]]:
        if (schema, name) not in self.known:
            self.known[schema, name] = list(describe(self.con, table(name, schema)))
        return self.known[schema, name]


def _file_relation(kind: _Kind, alias: str) -> exp.Expression:
    """The relation a file snapshot's view reads (its file, with the casts back to its types)."""
    assert kind.path is not None
    if "REPLACE" not in kind.sql:  # no cast: the file itself
        return read_relation(kind.path, alias, [])
    query = _parse_view(kind.sql)
    assert query is not None, kind.sql
    return query.subquery(alias)


def _served_view(
    kinds: dict[str, _Kind],
    types: _Types,
    data: Path,
    entry: int,
    schema: str,
    name: str,
    query: exp.Query | None,
    exports: dict[Path, exp.Query],
    read_files: set[Path],
) -> _ServedView:
    """The view as readers get it, over Parquet files; the files it needs are added to `exports`
    (to write) or `read_files` (snapshot files, read where they are).

    A snapshot stored as a file is read from that file: nothing is copied. A snapshot table is
    exported once (it never changes). A view snapshot (`materialize: view`) reads its inputs live,
    sources included, so its rows are exported again at each history entry. A view edited to read
    anything else is served as its rows at this entry.
    """
    if _is_edited(query, kinds):
        path = data / f"{schema}.{name}@{entry}.parquet"
        columns = types.of(schema, name)
        exports.setdefault(path, _export_query(table(name, schema), columns))
        return _ServedView(schema, name, exp.select("*").from_(read_relation(path, name, columns)))
    assert query is not None
    query = query.copy()
    for node in list(query.find_all(exp.Table)):
        snapshot = node.name
        kind = kinds[snapshot]
        if kind.kind == "file":
            assert kind.path is not None
            read_files.add(kind.path)
            node.replace(_file_relation(kind, node.alias or snapshot))
            continue
        columns = types.of(SNAPSHOT_SCHEMA, snapshot)
        path = data / (f"{snapshot}.parquet" if kind.kind == "table" else f"{snapshot}@{entry}.parquet")
        exports.setdefault(path, _export_query(table(snapshot, SNAPSHOT_SCHEMA), columns))
        node.replace(read_relation(path, node.alias or snapshot, columns))
    return _ServedView(schema, name, query)


def _is_edited(query: exp.Query | None, kinds: dict[str, _Kind]) -> bool:
    """A live view that reads anything but snapshots (edited by hand): served as its rows."""
    return query is None or any(
        node.db != SNAPSHOT_SCHEMA or node.name not in kinds for node in query.find_all(exp.Table)
    )


def _parse_view(sql: str) -> exp.Query | None:
    try:
        parsed = sqlglot.parse_one(sql, read=DIALECT)
    except sqlglot.errors.ParseError:
        return None
    query = parsed.expression if isinstance(parsed, exp.Create) else parsed
    return query if isinstance(query, exp.Query) else None


def _export_query(relation: exp.Table, columns: list[tuple[str, str]]) -> exp.Query:
    return write_query(relation, columns)


def _digest(folder: Path, entry: int) -> str:
    """Names the catalog by the history entry it serves: every change of a live view (a run, a
    rollback, a branch, a promotion, gc) is published together with a history entry, in one
    transaction, so the catalog is current exactly when it was written for the latest entry (of
    this warehouse's folder: a copied warehouse gets its own). A session that published nothing
    finds it current from two small queries; what is read live (a view model, an edited view) is
    served as its rows at that entry."""
    text = json.dumps([str(folder.absolute()), entry])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _export(con: duckdb.DuckDBPyConnection, path: Path, query: exp.Query) -> int:
    """Write `query`'s rows to `path` unless it exists; a crash leaves only a temporary name."""
    if path.exists():
        return 0
    copy_to_file(con, path, query)
    return 1


def _write_catalog(
    con: duckdb.DuckDBPyConnection, catalog: Path, served: list[_ServedView], entry: int, digest: str
) -> None:
    staging = catalog.with_name(f".{catalog.name}.{os.getpid()}")
    for leftover in (staging, staging.with_name(staging.name + ".wal")):
        leftover.unlink(missing_ok=True)
    attach = exp.Attach(this=exp.alias_(exp.Literal.string(str(staging)), _NEW_CATALOG))
    run(con, attach)
    try:
        for schema in sorted({view.schema for view in served} | {STATE_SCHEMA}):
            run(con, exp.Create(this=_in_new(schema), kind="SCHEMA", exists=True))
        for view in served:
            statement = exp.Create(this=_in_new(view.schema, view.name), kind="VIEW", expression=view.query)
            run(con, statement)
        state = _in_new(STATE_SCHEMA, STATE_TABLE)
        run(
            con,
            exp.Create(
                this=state,
                kind="TABLE",
                expression=exp.select(
                    exp.cast(exp.Literal.number(entry), "BIGINT").as_("entry"),
                    exp.Literal.string(digest).as_("digest"),
                    exp.func("now").as_("published_at"),
                ),
            ),
        )
    finally:
        run(con, exp.Detach(this=exp.to_identifier(_NEW_CATALOG)))
    fsync(staging)
    os.replace(staging, catalog)


def _in_new(schema: str, name: str | None = None) -> exp.Table:
    if name is None:
        return exp.Table(this=exp.to_identifier(schema), db=exp.to_identifier(_NEW_CATALOG))
    node = table(name, schema)
    node.set("catalog", exp.to_identifier(_NEW_CATALOG))
    return node


def _manifest(catalog: Path) -> Path:
    return catalog.with_suffix(".json")


def _write_manifest(catalog: Path, files: list[str], snapshot_files: list[str]) -> None:
    """`files`: the exports in data/ the catalog reads; `snapshot_files`: the snapshots' own files."""
    manifest = _manifest(catalog)
    staging = manifest.with_name(f".{manifest.name}.{os.getpid()}")
    staging.write_text(json.dumps({"files": files, "snapshot_files": snapshot_files}))
    os.replace(staging, manifest)


def _retire(catalog: Path) -> None:
    """Stamp when a catalog stopped being live: gc keeps it readable for the grace period."""
    manifest = _manifest(catalog)
    if manifest.exists():
        os.utime(manifest)


@dataclass(frozen=True)
class ServingCollection:
    catalogs_removed: int
    files_removed: int
    bytes_removed: int
    # The snapshot files (snapshot_files.py) the kept catalogs read: gc keeps them for the readers.
    kept_snapshot_files: frozenset[str] = frozenset()
    # Filled in by Session.collect_files: the snapshot files nothing read any more, removed.
    snapshot_files_removed: int = 0
    snapshot_bytes_removed: int = 0


def collect(warehouse: Path, grace: float | None = None) -> ServingCollection:
    """Remove the catalogs retired more than `grace` seconds ago and the files no kept catalog
    reads. A reader attached to a removed catalog keeps its open file, but not the Parquet files."""
    folder = serving_dir(warehouse)
    if not folder.is_dir():
        return ServingCollection(0, 0, 0)
    wait = grace_seconds() if grace is None else grace
    live = live_path(warehouse)
    current = os.readlink(live) if live.is_symlink() else None
    now = time.time()
    kept: set[str] = set()
    kept_snapshot_files: set[str] = set()
    catalogs_removed = 0
    for manifest in sorted(folder.glob("catalog-*.json")):
        catalog = manifest.with_suffix(".duckdb")
        if catalog.name == current or now - manifest.stat().st_mtime < wait:
            listed = json.loads(manifest.read_text())
            kept.update(listed["files"])
            kept_snapshot_files.update(listed.get("snapshot_files", ()))
            continue
        catalog.unlink(missing_ok=True)
        manifest.unlink()
        catalogs_removed += 1
    files_removed = bytes_removed = 0
    for path in sorted((folder / "data").glob("*.parquet")):
        if path.name not in kept:
            bytes_removed += path.stat().st_size
            path.unlink()
            files_removed += 1
    # Staging files of a write a crash cut short (never read: they have no final name).
    for leftover in [*folder.glob(".*"), *(folder / "data").glob(".*")]:
        if now - leftover.lstat().st_mtime >= wait:
            leftover.unlink(missing_ok=True)
    return ServingCollection(catalogs_removed, files_removed, bytes_removed, frozenset(kept_snapshot_files))


def snapshot_files_read_since(warehouse: Path, since: float) -> set[str]:
    """The snapshot files read by the catalogs written or retired at or after `since` (epoch
    seconds): those a session that started then may have made readers depend on."""
    names: set[str] = set()
    folder = serving_dir(warehouse)
    if not folder.is_dir():
        return names
    for manifest in folder.glob("catalog-*.json"):
        if manifest.stat().st_mtime >= since:
            names.update(json.loads(manifest.read_text()).get("snapshot_files", ()))
    return names


def grace_seconds() -> float:
    return seconds_from_env(GRACE_ENV, DEFAULT_GRACE, E_GC, example=3600)


@contextmanager
def open_live(warehouse: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory connection reading the live views through the serving catalog."""
    con = duckdb.connect()
    try:
        con.execute(reader_statement(warehouse))
        yield con
    finally:
        con.close()
