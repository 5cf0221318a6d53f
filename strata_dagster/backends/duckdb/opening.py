"""Opening a DuckDB warehouse: the file locked and migrated, a moved warehouse's snapshot views
pointed at the files beside it, and on closing a writer's serving copy refreshed and the snapshot
files it wrote but never published removed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from sqlglot import exp

from strata_dagster.backends.choice import BackendChoice
from strata_dagster.backends.duckdb import relocation, serving, snapshot_files
from strata_dagster.backends.duckdb import sources as source_reading
from strata_dagster.backends.duckdb.connection import connect
from strata_dagster.backends.duckdb.limits import connect_in_memory, exceeded_error
from strata_dagster.backends.duckdb.session import DuckDBSession, refresh_serving
from strata_dagster.errors import E_SERVING, E_WAREHOUSE, StrataError
from strata_dagster.language.definition import Project
from strata_dagster.paths import shortened
from strata_dagster.state.migrations import READABLE_WITHOUT_MIGRATING, current_version, migrate


@contextmanager
def open_duckdb_session(
    path: Path,
    choice: BackendChoice | None = None,
    *,
    read_only: bool = False,
    must_exist: bool = False,
    timeout: float | None = None,
) -> Iterator[DuckDBSession]:
    """Open the warehouse file (waiting up to `timeout` seconds, default $STRATA_LOCK_TIMEOUT, for
    another process's lock), migrated unless read-only; with `must_exist`, a missing warehouse is
    an error (E020) instead of a new, empty one."""
    if not read_only:
        snapshot_files.storage()  # a bad setting is E037 before anything is opened or written
    with _open(path, read_only=read_only, must_exist=must_exist, timeout=timeout) as session:
        yield session


@contextmanager
def _open(
    path: Path, *, read_only: bool, must_exist: bool, timeout: float | None, may_relocate: bool = True
) -> Iterator[DuckDBSession]:
    with connect(path, read_only=read_only, must_exist=must_exist, timeout=timeout) as con:
        views = snapshot_files.views_over_files(con)
        folder = snapshot_files.folder_of(path.absolute())
        moved = relocation.moved_views(views, folder)
        if not (read_only and moved and may_relocate):
            with _opened(con, path, read_only, views, moved, folder) as session:
                yield session
            return
    # A moved or copied warehouse opened to read: its snapshot views are pointed at the files
    # beside it first (backends.duckdb.relocation), by a short write session, then it is read.
    _relocate_in_place(path, timeout)
    with _open(path, read_only=True, must_exist=must_exist, timeout=timeout, may_relocate=False) as session:
        yield session


@contextmanager
def _opened(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    read_only: bool,
    views: dict[str, str],
    moved: dict[str, exp.Create],
    folder: Path,
) -> Iterator[DuckDBSession]:
    opened = time.time()
    session: DuckDBSession | None = None
    try:
        session = DuckDBSession(
            con, schema_version=_readable_version(con, path) if read_only else migrate(con)
        )
        paths = snapshot_files.FileIndex.of(views).paths
        if moved and not read_only:
            relocation.apply(session, moved)
            paths.update({name: folder / paths[name].name for name in moved})
        session.know_files(snapshot_files.FileIndex(paths))
        yield session
    except BaseException as error:
        if session is not None:
            session.rollback()
            _remove_unpublished_files(session, path, opened)
        if isinstance(error, duckdb.OutOfMemoryException):
            raise exceeded_error(error) from None
        raise
    if not read_only:
        try:
            refresh_serving(con, path, session.writer.entries_added)
        finally:
            _remove_unpublished_files(session, path, opened)


def _relocate_in_place(path: Path, timeout: float | None) -> None:
    """Open `path` to write for the relocation alone (and the serving copy it refreshes). A
    warehouse that cannot be written (read-only files or mount) is then read as it is."""
    try:
        with open_duckdb_session(path, must_exist=True, timeout=timeout):
            pass
    except StrataError as error:
        if error.code not in (E_WAREHOUSE, E_SERVING):
            raise


def _remove_unpublished_files(session: DuckDBSession | None, path: Path, opened: float) -> None:
    """Remove the snapshot files this session wrote that no committed view reads (a failed or
    rolled-back build, a scratch table, a segment replaced before publication). A failure here
    only leaves garbage for `strata gc`."""
    files = session.files_if_used if session is not None else None
    if session is None or files is None or files.folder is None or not files.written:
        return
    try:
        kept = serving.snapshot_files_read_since(path, opened)
        if kept is not None:
            snapshot_files.remove_unreferenced(session.con, files.folder, kept, candidates=files.written)
    except (duckdb.Error, OSError):
        pass


@contextmanager
def open_served(path: Path) -> Iterator[DuckDBSession]:
    """A session that reads the live views through the serving copy, never the writer's file. A
    warehouse published before the serving copy existed gets one first (a short write session)."""
    if not serving.is_served(path):
        with open_duckdb_session(path, must_exist=True):
            pass
    with serving.open_live(path) as con:
        yield DuckDBSession(con)


def source_schemas_of(warehouse: Path | None, project: Project) -> dict[str, tuple[tuple[str, str], ...]]:
    """(column, type) of every source readable now from the warehouse file `warehouse`, without
    writing anything; file sources alone, described in memory, when the file does not exist (or
    None)."""
    if warehouse is not None and warehouse.exists():
        with connect(warehouse, read_only=True) as con:
            return source_reading.source_schemas_with_databases(con, project)
    con = connect_in_memory()
    try:
        return source_reading.source_schemas_with_databases(con, project)
    finally:
        con.close()


def _readable_version(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """The schema version of the history a read-only session finds (0: none yet); E020 for one an
    older strata wrote in a form a read-only command cannot read without migrating it (which only
    a writing command does)."""
    version = current_version(con)
    if 0 < version < READABLE_WITHOUT_MIGRATING:
        raise StrataError(
            E_WAREHOUSE,
            f"warehouse `{shortened(path)}` keeps its history in the form of an older strata "
            f"(schema version {version}; this command reads {READABLE_WITHOUT_MIGRATING} and later)",
            hint="run `strata run` once with this version (it upgrades the history tables), then try again",
        )
    return version
