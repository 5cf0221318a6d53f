"""One open warehouse, as the engine sees it: transactions, snapshots, views, history and content.

The engine never touches duckdb itself (README.md, Where things are): DuckDB failures surface here
as WarehouseError, which carries DuckDB's first message line and nothing else.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from sqlglot import exp

from strata_dagster.compile.relations import view_name
from strata_dagster.errors import E_SERVING, E_WAREHOUSE, StrataError, first_line
from strata_dagster.language.definition import Project
from strata_dagster.warehouse import relocation, row_groups, serving, snapshot_files, tables
from strata_dagster.warehouse import sources as source_reading
from strata_dagster.warehouse.compaction import free_bytes
from strata_dagster.warehouse.connection import connect, damaged_file_error, is_interruption
from strata_dagster.warehouse.content import (
    WHOLE_ROW,
    Content,
    RowBasis,
    content_by_group,
    content_by_groups,
    content_of,
)
from strata_dagster.warehouse.engines import current_engine, engine_opener
from strata_dagster.warehouse.faults import checkpoint
from strata_dagster.warehouse.history import HistoryReader, HistoryWriter
from strata_dagster.warehouse.key_bounds import KeyBounds
from strata_dagster.warehouse.key_figures import create_changed_keys, create_key_figures, partitions_meeting
from strata_dagster.warehouse.limits import connect_in_memory, exceeded_error, exceeded_setting
from strata_dagster.warehouse.migrations import current_version, migrate
from strata_dagster.warehouse.segments import (
    KeyRange,
    Segment,
    WindowStats,
    composite_query,
    content_and_key_sum_where,
    content_where,
    count_null_keys,
    counts_at_or_below,
    create_keys_table,
    create_values_table,
    key_sum,
    max_value,
    window_stats,
)
from strata_dagster.warehouse.snapshot_files import SnapshotFiles
from strata_dagster.warehouse.sql import describe, render, run

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa


class WarehouseError(Exception):
    """DuckDB refused a statement; `str()` is its first message line."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self._missing = missing

    @property
    def is_missing_relation(self) -> bool:
        """A table, view or file it reads does not exist (yet), as opposed to a statement refused."""
        return self._missing


class ResourceLimitExceeded(WarehouseError):
    """DuckDB ran out of its memory limit or its spill space; `setting` names the one to raise."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


@contextmanager
def warehouse_errors() -> Iterator[None]:
    try:
        yield
    except duckdb.OutOfMemoryException as error:
        raise ResourceLimitExceeded(first_line(error), exceeded_setting(str(error))) from None
    except duckdb.Error as error:
        if is_interruption(error):
            raise KeyboardInterrupt from None
        damaged = damaged_file_error(error)
        if damaged is not None:
            raise damaged from None
        raise WarehouseError(first_line(error), missing=_is_missing(error)) from None


def _is_missing(error: duckdb.Error) -> bool:
    if isinstance(error, duckdb.CatalogException):
        return True
    return isinstance(error, duckdb.IOException) and "No files found" in str(error)


class Session:
    engine = "duckdb"
    # Whether one scan under a NULL-safe anti-join costs less than two scans under a plain
    # semi-join (engine.incremental's kept-rows check): not on DuckDB.
    prefers_anti_join = False
    # Publications a crash cut short, found when the session opened: never on DuckDB, whose one
    # transaction publishes all or nothing (spark/history_log.py on Spark).
    interrupted: list[Any] = []

    def __init__(self, con: duckdb.DuckDBPyConnection, *, schema_version: int | None = None) -> None:
        self.con = con
        # Where the history tables are: the warehouse itself here; an in-memory mirror of them on
        # an engine without transactions (warehouse/history_mirror.py).
        self.meta = con
        self.history = HistoryReader(con)
        self.writer = HistoryWriter(con)
        self._files: SnapshotFiles | None = None
        self._file_index: snapshot_files.FileIndex | None = None
        # The schema version this session migrated the file to (None: not migrated, read-only),
        # and the database's name and file, read once: neither changes while the file is open.
        self._schema_version = schema_version
        self._database: tuple[str, str | None] | None = None
        self._held: dict[Hashable, exp.Table] = {}
        self._held_made = 0  # never reused: a rollback forgets names whose tables may live on

    def know_files(self, index: snapshot_files.FileIndex) -> None:
        """The files the snapshot views read, as found when the session opened."""
        self._file_index = index

    def file_index(self) -> snapshot_files.FileIndex:
        """The file each snapshot view reads (as found when the session opened)."""
        if self._file_index is None:
            self._file_index = snapshot_files.FileIndex.of(snapshot_files.views_over_files(self.con))
        return self._file_index

    def damaged_files(self, tables: Iterable[str]) -> list[snapshot_files.FileDamage]:
        """The snapshot files of `tables` (and of the snapshots named after them) that are missing
        or cannot be read as whole Parquet files: a state reading them is not there to build on."""
        return self.file_index().damaged(tables)

    @property
    def files(self) -> SnapshotFiles:
        """Where this session writes snapshot files, and those it wrote (read on first use)."""
        if self._files is None:
            self._files = SnapshotFiles.of(self.database_path())
        return self._files

    # -- transactions -----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together or not at all."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def begin(self) -> None:
        self.con.execute("BEGIN TRANSACTION")

    def commit(self) -> None:
        """Commit; the snapshot files the transaction's views read are made durable first."""
        if self._files is not None:
            self._files.sync()
        self.con.execute("COMMIT")

    def checkpoint(self) -> None:
        """Write everything committed into the file, so freed blocks show as free."""
        self.con.execute("CHECKPOINT")

    def free_bytes(self) -> int:
        return free_bytes(self.con)

    def rollback(self) -> None:
        if self._files is not None:
            self._files.kinds = None  # what the transaction did to the snapshot schema is undone
        self._held.clear()  # temporary tables made in the transaction are gone with it
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # no transaction left to roll back: nothing of it was committed

    # -- sources ----------------------------------------------------------------------------------
    def prepare_sources(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """Attach source databases, check overrides, and return the schemas of readable sources."""
        source_reading.attach_source_databases(self.con, project)
        source_reading.check_overrides_exist(self.con, overrides)
        return source_reading.source_schemas(self.con, project, overrides)

    def describe(self, relation: exp.Table | exp.Query) -> tuple[tuple[str, str], ...]:
        with warehouse_errors():
            return describe(self.con, relation)

    def content(
        self,
        relation: exp.Table | exp.Query,
        basis: RowBasis = WHOLE_ROW,
        columns: tuple[tuple[str, str], ...] | None = None,
    ) -> Content:
        with warehouse_errors():
            return content_of(self.con, relation, basis, columns)

    # -- snapshots and views ----------------------------------------------------------------------
    def create_snapshot(self, name: str, query: exp.Query) -> None:
        with warehouse_errors():
            tables.create_snapshot(self.con, name, query, self.files)

    def create_view_snapshot(self, name: str, query: exp.Query) -> None:
        with warehouse_errors():
            tables.create_view_snapshot(self.con, name, query, self.files)

    def drop_snapshot(self, name: str) -> None:
        tables.drop_table(self.con, name, self.files)

    def rename_snapshot(self, name: str, new_name: str) -> None:
        with warehouse_errors():
            tables.rename_snapshot(self.con, name, new_name, self.files)

    def snapshot_exists(self, name: str) -> bool:
        return tables.table_exists(self.con, name)

    def view_tables(self, branch_schema: str, model: str) -> tuple[str, ...] | None:
        return tables.view_snapshot_tables(self.con, branch_schema, model)

    def catalog(self, branch_schema: str) -> CatalogSnapshot:
        """The snapshot tables and the views of a branch as they are now, read in two queries."""
        return CatalogSnapshot(
            frozenset(tables.snapshot_table_names(self.con)),
            tables.view_sqls(self.con, branch_schema),
            self.con,
        )

    def point_view(self, branch_schema: str, model: str, table_names: Sequence[str]) -> None:
        tables.point_view_at(
            self.con, branch_schema, model, composite_query([Segment(name) for name in table_names])
        )

    def point_view_at(self, branch_schema: str, model: str, query: exp.Query) -> None:
        tables.point_view_at(self.con, branch_schema, model, query)

    def drop_view(self, branch_schema: str, model: str) -> None:
        tables.drop_view(self.con, branch_schema, model)

    # -- incremental ------------------------------------------------------------------------------
    def window_stats(
        self,
        relation: exp.Table,
        cdc: exp.Expression,
        low: exp.Expression | None,
        lateness: exp.Expression | None,
        totals: tuple[int, str] | None = None,
        basis: RowBasis = WHOLE_ROW,
    ) -> WindowStats:
        with warehouse_errors():
            return window_stats(self.con, relation, cdc, low, lateness, totals, basis)

    def create_keys_table(
        self,
        name: str,
        relation: exp.Table,
        keys: Sequence[tuple[str, exp.Expression]],
        window: exp.Expression,
        deleted_from: exp.Query | None,
        merge_keys: Sequence[str],
        reread: tuple[exp.Query, exp.Expression] | None = None,
    ) -> int:
        with warehouse_errors():
            return create_keys_table(
                self.con, name, relation, keys, window, deleted_from, merge_keys, reread, self.files
            )

    def content_by_group(
        self, relation: exp.Table | exp.Query, key: exp.Expression, basis: RowBasis = WHOLE_ROW
    ) -> dict[str | None, tuple[int, str]]:
        with warehouse_errors():
            return content_by_group(self.con, relation, key, basis)

    def content_by_groups(
        self, relation: exp.Table | exp.Query, keys: list[exp.Expression], limit: int | None = None
    ) -> dict[tuple[str | None, ...], tuple[int, str]]:
        with warehouse_errors():
            return content_by_groups(self.con, relation, keys, limit=limit)

    def create_values_table(self, name: str, column: str, values: Sequence[exp.Expression]) -> None:
        with warehouse_errors():
            create_values_table(self.con, name, column, values, self.files)

    def held_rows(self, key: Hashable, query: Callable[[], exp.Query]) -> exp.Table | exp.Query:
        """The rows of `query()`, kept in a temporary table for the rest of the session the first
        time `key` is asked for: for a few rows that are costly to find and that several statements
        read (the rows of an input's earlier state that its new segments replace, read by each
        model following it). `key` must name everything the rows depend on."""
        held = self._held.get(key)
        if held is None:
            self._held_made += 1
            held = exp.table_(f"__strata_held_{self._held_made}", db="main", catalog="temp")
            create = exp.Create(
                this=held.copy(),
                kind="TABLE",
                expression=query(),
                properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
            )
            with warehouse_errors():
                run(self.con, create, consume=True)
            self._held[key] = held
        return held.copy()

    def share_read_by_ranges(
        self, tables: Sequence[str], column: str, type_name: str, runs: Sequence[tuple[date, date]]
    ) -> float | None:
        """The share of the snapshots' rows in row groups a read of `column` in `runs` cannot skip,
        from their files' statistics (None: unknown, e.g. a snapshot that is a table)."""
        with warehouse_errors():
            files = row_groups.snapshot_files(self.con, tables)
            return None if not files else row_groups.share_read(self.con, files, column, type_name, runs)

    def forget_held(self, key: Hashable) -> None:
        """Drop the rows held for `key` (what they were read from is about to change)."""
        held = self._held.pop(key, None)
        if held is not None:
            with warehouse_errors():
                run(self.con, exp.Drop(tables=[held], kind="TABLE", exists=True))

    def count_null_keys(self, name: str, keys: Sequence[str]) -> int:
        with warehouse_errors():
            return count_null_keys(self.con, name, keys)

    def key_range(self, name: str, keys: Sequence[str]) -> KeyRange | None:
        """The range of a keys table's one key, to read a state or source with beside the key
        match (segments.keyed_rows); None here: DuckDB prunes a scan with a join's keys itself."""
        return None

    def key_bounds(self, name: str, keys: Sequence[str]) -> KeyBounds | None:
        """The least and greatest key of a keys table of one key (warehouse.key_bounds); None here:
        DuckDB finds a state's replaced rows with a join that costs little when there are none."""
        return None

    def key_sum_and_bounds(
        self, relation: exp.Table | exp.Query, columns: Sequence[str], keys: Sequence[str]
    ) -> tuple[tuple[int, str], KeyBounds | None]:
        """`key_sum`, and the bounds of the one key in `keys` where this engine records them."""
        return self.key_sum(relation, columns), None

    def content_where(
        self, relation: exp.Table | exp.Query, condition: exp.Expression | None = None
    ) -> tuple[int, str]:
        with warehouse_errors():
            return content_where(self.con, relation, condition)

    def content_and_key_sum_where(
        self, query: exp.Query, condition: exp.Expression, columns: Sequence[str]
    ) -> tuple[int, str, str]:
        with warehouse_errors():
            return content_and_key_sum_where(self.con, query, condition, columns)

    def key_sum(self, relation: exp.Table | exp.Query, columns: Sequence[str]) -> tuple[int, str]:
        with warehouse_errors():
            return key_sum(self.con, relation, columns)

    def content_and_key_sum(
        self, table: exp.Table, columns: Sequence[str]
    ) -> tuple[Content, tuple[int, str]]:
        """A table's content and its `key_sum` over `columns`."""
        return self.content(table), self.key_sum(table, columns)

    def counts_at_or_below(
        self, relation: exp.Table | exp.Query, column: exp.Expression, bounds: Sequence[exp.Expression]
    ) -> list[int]:
        with warehouse_errors():
            return counts_at_or_below(self.con, relation, column, bounds)

    def max_value(self, relation: exp.Table | exp.Query, column: str) -> tuple[str | None, str]:
        with warehouse_errors():
            return max_value(self.con, relation, column)

    # -- joined inputs ----------------------------------------------------------------------------
    def create_key_figures(self, name: str, relation: exp.Table | exp.Query, keys: Sequence[str]) -> None:
        with warehouse_errors():
            create_key_figures(self.con, name, relation, keys, self.files)

    def create_changed_keys(self, name: str, before: str, after: str, keys: Sequence[str]) -> int:
        with warehouse_errors():
            return create_changed_keys(self.con, name, before, after, keys, self.files)

    def partitions_meeting(
        self,
        relation: exp.Table | exp.Query,
        partition: exp.Expression,
        values: Sequence[exp.Expression],
        keys_table: str,
        keys: Sequence[str],
    ) -> set[str | None]:
        with warehouse_errors():
            return partitions_meeting(self.con, relation, partition, values, keys_table, keys)

    def refresh_serving(self, path: Path) -> serving.ServingState | None:
        """Bring the serving copy up to date now (every write session also does on closing)."""
        return refresh_serving(self.con, path)

    def collect_files(self, path: Path, grace: float) -> serving.ServingCollection:
        """Remove the serving catalogs retired more than `grace` seconds ago, then every file
        (serving export or snapshot file) that neither a snapshot view nor a kept catalog reads.
        Only a write session may: it holds the lock, so no other process is writing files."""
        collected = serving.collect(path, grace)
        if collected.keeps_every_file:
            return collected
        with warehouse_errors():
            removed = snapshot_files.remove_unreferenced(
                self.con, snapshot_files.folder_of(path.absolute()), kept=set(collected.kept_snapshot_files)
            )
        return dataclasses.replace(
            collected, snapshot_files_removed=removed.files, snapshot_bytes_removed=removed.bytes
        )

    def has_history(self) -> bool:
        """Whether the history tables exist (a read-only session never creates them)."""
        if self._schema_version:
            return True  # migrated by this session: its tables are there until it ends
        return current_version(self.con) > 0

    def database_name(self) -> str:
        """The catalog name DuckDB gives the warehouse: its file name without the extension."""
        return self._database_row()[0]

    def database_path(self) -> str | None:
        """The warehouse's file as DuckDB opened it (None: an in-memory database)."""
        return self._database_row()[1]

    def _database_row(self) -> tuple[str, str | None]:
        if self._database is None:
            row = self.con.execute(
                "SELECT database_name, path FROM duckdb_databases() WHERE database_name = current_database()"
            ).fetchone()
            assert row is not None
            self._database = (str(row[0]), str(row[1]) if row[1] else None)
        return self._database

    def schema_has_tables(self, schema: str) -> bool:
        """Whether schema `schema` (in any case: DuckDB resolves names ignoring it) holds tables."""
        row = self.con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE lower(schema_name) = lower(?) "
            "AND database_name = current_database()",
            [schema],
        ).fetchone()
        return bool(row and row[0])

    # -- reading rows out ---------------------------------------------------------------------------
    def read_rows(
        self, relation: exp.Table | exp.Query, limit: int | None = None
    ) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
        """A relation's columns and its rows (the first `limit` of them), as Python values."""
        columns = self.describe(relation)
        source = relation.subquery("__shown") if isinstance(relation, exp.Query) else relation.copy()
        query = exp.select("*").from_(source)
        if limit is not None:
            query = query.limit(limit)
        with warehouse_errors():
            rows = [tuple(row) for row in run(self.con, query).fetchall()]
        return columns, rows

    def read_arrow(self, query: exp.Query) -> pa.Table:
        """A query's rows as an Arrow table (for frames handed to Python code)."""
        with warehouse_errors():
            self.con.complete()  # DuckDB 2 runs no relation query while a result is still open
            return self.con.sql(render(query)).to_arrow_table()

    def register_frame(self, name: str, frame: pa.Table) -> None:
        """An Arrow table readable as relation `name` until `unregister_frame` (zero-copy)."""
        # DuckDB 2 refuses to (un)register while an earlier statement's result is still open.
        self.con.complete()
        self.con.register(name, frame)

    def unregister_frame(self, name: str) -> None:
        self.con.complete()
        self.con.unregister(name)

    def export_rows(self, relation: exp.Table | exp.Query, path: Path, file_format: str) -> int:
        """Write every row of a relation to a Parquet or CSV file (with a header); the row count."""
        source = relation.subquery("__exported") if isinstance(relation, exp.Query) else relation.copy()
        query = exp.select("*").from_(source)
        parameters = [exp.CopyParameter(this=exp.var("FORMAT"), expression=exp.var(file_format.upper()))]
        if file_format == "csv":
            parameters.append(exp.CopyParameter(this=exp.var("HEADER"), expression=exp.true()))
        statement = exp.Copy(
            this=query.subquery(), kind=False, files=[exp.Literal.string(str(path))], params=parameters
        )
        with warehouse_errors():
            run(self.con, statement)
            row = run(self.con, exp.select(exp.func("count_star")).from_(source.copy())).fetchone()
        return int(row[0]) if row else 0

    def unique_violation(
        self, relation: str | exp.Query, columns: Sequence[str]
    ) -> tables.PinViolation | None:
        with warehouse_errors():
            return tables.unique_violation(self.con, relation, columns)

    def contract_violation(
        self, name: str, contract: Sequence[tuple[str, str, bool]]
    ) -> tables.PinViolation | None:
        with warehouse_errors():
            return tables.contract_violation(self.con, name, contract)


@dataclass
class CatalogSnapshot:
    """What the catalog held when read: for questions asked many times in one run about the state
    it started from (never about what the run itself writes)."""

    snapshot_tables: frozenset[str]
    views: dict[str, str]  # view name -> stored SQL
    con: duckdb.DuckDBPyConnection | None = None  # to parse a view's SQL with DuckDB's own parser
    _parsed: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def view_tables(self, model: str) -> tuple[str, ...] | None:
        """Like Session.view_tables, for the branch the snapshot was read on."""
        name = view_name(model)
        if name not in self.views:
            return None
        if name not in self._parsed:
            self._parsed[name] = tables.snapshot_tables_of_view(self.con, self.views[name])
        return self._parsed[name]


@contextmanager
def open_session(
    path: Path, *, read_only: bool = False, must_exist: bool = False, timeout: float | None = None
) -> Iterator[Session]:
    """Open the warehouse (waiting up to `timeout` seconds, default $STRATA_LOCK_TIMEOUT, for
    another process's lock), migrated unless read-only.

    With `must_exist`, a missing warehouse is an error (E020) instead of a new, empty one.
    On another engine than DuckDB (warehouse/engines.py), `path` is that engine's warehouse and
    the session is its own implementation of this interface.
    """
    choice = current_engine()
    if not choice.is_duckdb:
        opener = engine_opener(choice)
        with opener(path, choice, read_only=read_only, must_exist=must_exist, timeout=timeout) as session:  # type: ignore[operator]
            yield session
        return
    if not read_only:
        snapshot_files.storage()  # a bad setting is E037 before anything is opened or written
    with _open_duckdb(path, read_only=read_only, must_exist=must_exist, timeout=timeout) as session:
        yield session


@contextmanager
def _open_duckdb(
    path: Path, *, read_only: bool, must_exist: bool, timeout: float | None, may_relocate: bool = True
) -> Iterator[Session]:
    with connect(path, read_only=read_only, must_exist=must_exist, timeout=timeout) as con:
        views = snapshot_files.views_over_files(con)
        folder = snapshot_files.folder_of(path.absolute())
        moved = relocation.moved_views(views, folder)
        if not (read_only and moved and may_relocate):
            with _opened(con, path, read_only, views, moved, folder) as session:
                yield session
            return
    # A moved or copied warehouse opened to read: its snapshot views are pointed at the files
    # beside it first (warehouse.relocation), by a short write session, then it is read.
    _relocate_in_place(path, timeout)
    with _open_duckdb(
        path, read_only=True, must_exist=must_exist, timeout=timeout, may_relocate=False
    ) as session:
        yield session


@contextmanager
def _opened(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    read_only: bool,
    views: dict[str, str],
    moved: dict[str, exp.Create],
    folder: Path,
) -> Iterator[Session]:
    opened = time.time()
    session: Session | None = None
    try:
        session = Session(con, schema_version=None if read_only else migrate(con))
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
            refresh_serving(con, path)
        finally:
            _remove_unpublished_files(session, path, opened)


def _relocate_in_place(path: Path, timeout: float | None) -> None:
    """Open `path` to write for the relocation alone (and the serving copy it refreshes). A
    warehouse that cannot be written (read-only files or mount) is then read as it is."""
    try:
        with open_session(path, must_exist=True, timeout=timeout):
            pass
    except StrataError as error:
        if error.code not in (E_WAREHOUSE, E_SERVING):
            raise


def _remove_unpublished_files(session: Session | None, path: Path, opened: float) -> None:
    """Remove the snapshot files this session wrote that no committed view reads (a failed or
    rolled-back build, a scratch table, a segment replaced before publication). A failure here
    only leaves garbage for `strata gc`."""
    files = session._files if session is not None else None
    if files is None or files.folder is None or not files.written:
        return
    try:
        kept = serving.snapshot_files_read_since(path, opened)
        if kept is not None:
            snapshot_files.remove_unreferenced(session.con, files.folder, kept, candidates=files.written)
    except (duckdb.Error, OSError):
        pass


def refresh_serving(con: duckdb.DuckDBPyConnection, path: Path) -> serving.ServingState | None:
    """Bring the serving copy readers open up to what this writer published (a no-op when it
    already is). Every write session ends here, so a crash that skipped it is repaired by the next."""
    try:
        return serving.refresh(con, path, on_step=checkpoint)
    except (duckdb.Error, OSError) as error:
        damaged = damaged_file_error(error, path)
        if damaged is not None:
            raise damaged from None
        raise StrataError(
            E_SERVING,
            f"the warehouse `{path}` is published, but its serving copy for readers could not be written: "
            f"{first_line(error)}",
            hint=f"readers still see the previous state; free space or fix permissions in `{serving.serving_dir(path)}`, "
            "then run any writing command again (e.g. `strata run PROJECT --only-stale`)",
        ) from None


@contextmanager
def open_live_session(path: Path) -> Iterator[Session]:
    """A session that reads the live views through the serving copy, never the writer's file.

    A warehouse published before the serving copy existed gets one first (a short write session).
    Engines that never lock readers out (Spark) read their live views directly.
    """
    if not current_engine().is_duckdb:
        with open_session(path, read_only=True) as session:
            yield session
        return
    if not serving.is_served(path):
        with open_session(path, must_exist=True):
            pass
    with serving.open_live(path) as con:
        yield Session(con)


def read_source_schemas(warehouse: Path, project: Project) -> dict[str, tuple[tuple[str, str], ...]]:
    """(column, type) of every source that can be read now, without writing anything.

    A warehouse that does not exist is not created: file sources are then described from an
    in-memory database, and table sources are simply not known yet.
    """
    if not current_engine().is_duckdb and warehouse.exists():
        with open_session(warehouse, read_only=True) as session:
            return session.source_schemas(project, {})  # type: ignore[attr-defined]
    if not current_engine().is_duckdb:
        warehouse = warehouse / "__not_a_duckdb_file__"  # describe file sources in memory below
    if warehouse.exists():
        with connect(warehouse, read_only=True) as con:
            return source_reading.source_schemas_with_databases(con, project)
    con = connect_in_memory()
    try:
        return source_reading.source_schemas_with_databases(con, project)
    finally:
        con.close()
