"""The DuckDB backend's Session: one open warehouse file, its snapshot files and its serving copy.

The engine never touches duckdb itself (docs/architecture.md, The backend boundary): it talks to the Session
interface (backends/base.py), and DuckDB failures surface here as WarehouseError, which carries
DuckDB's first message line and nothing else. Opening a warehouse is backends/duckdb/opening.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import (
    CatalogSnapshot,
    ResourceLimitExceeded,
    ServingCollection,
    WarehouseError,
)
from strata_dagster.backends.choice import DUCKDB_CAPABILITIES
from strata_dagster.backends.duckdb import row_groups, serving, snapshot_files, tables
from strata_dagster.backends.duckdb import sources as source_reading
from strata_dagster.backends.duckdb.connection import damaged_file_error, is_interruption
from strata_dagster.backends.duckdb.limits import exceeded_setting
from strata_dagster.backends.duckdb.snapshot_files import SnapshotFiles
from strata_dagster.backends.file_stamps import FileStamp, database_stamp, files_stamp
from strata_dagster.backends.sql import tables as shared_tables
from strata_dagster.backends.sql.figures import content_and_key_sum, create_keys_table
from strata_dagster.backends.sql.runner import run
from strata_dagster.backends.sql.session import SqlSession
from strata_dagster.compile.relations import view_name
from strata_dagster.errors import E_SERVING, StrataError, first_line
from strata_dagster.faults import checkpoint
from strata_dagster.language.definition import Project
from strata_dagster.sql.content import Content
from strata_dagster.sql.key_bounds import KeyBounds
from strata_dagster.sql.render import render
from strata_dagster.sql.segments import KeyRange
from strata_dagster.state import stamp_records
from strata_dagster.state.detail_files import DetailFiles
from strata_dagster.state.history import HistoryReader, HistoryWriter
from strata_dagster.state.migrations import current_version

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa


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


class DuckDBSession(SqlSession):
    """One open DuckDB warehouse (or a reader's connection to its serving copy)."""

    backend = "duckdb"
    capabilities = DUCKDB_CAPABILITIES
    # A NULL-safe anti-join costs DuckDB more than two scans under a plain semi-join.
    prefers_anti_join = False

    def __init__(self, con: duckdb.DuckDBPyConnection, *, schema_version: int | None = None) -> None:
        self.con: duckdb.DuckDBPyConnection = con
        # Where the history tables are: the warehouse itself.
        self.meta = con
        self._files: SnapshotFiles | None = None
        self._file_index: snapshot_files.FileIndex | None = None
        # The schema version of the history when the session opened: the one it migrated the file
        # to, or the one a read-only session found (None: not given), and the database's name and
        # file, read once: none of them changes while the file is open.
        self._schema_version = schema_version
        self._database: tuple[str, str | None] | None = None
        self._held: dict[Hashable, exp.Table] = {}
        self._held_made = 0  # never reused: a rollback forgets names whose tables may live on
        # Values moved out of history records (state/detail_files.py), beside the snapshot files.
        self.detail_files = DetailFiles.of(self.database_path(), writes=snapshot_files.storage() == "parquet")
        if self.detail_files is not None:
            self.detail_files.elsewhere = self._other_snapshot_folders
        self.history = HistoryReader(con, self.detail_files)
        self.writer = HistoryWriter(con, self.detail_files)

    def statement_errors(self) -> AbstractContextManager[None]:
        return warehouse_errors()

    def content_and_key_sum(
        self, table: exp.Table, columns: Sequence[str]
    ) -> tuple[Content, tuple[int, str]]:
        """In one scan of the table (a snapshot file is read once, not twice)."""
        with self.statement_errors():
            return content_and_key_sum(self.con, table, columns)

    def content_and_key_figures(
        self, table: exp.Table, columns: Sequence[str], keys: Sequence[str]
    ) -> tuple[Content, tuple[int, str], KeyBounds | None]:
        """In one scan; DuckDB records no key bounds (`key_sum_and_bounds`)."""
        return (*self.content_and_key_sum(table, columns), None)

    def _other_snapshot_folders(self) -> list[Path]:
        """The folders other than the warehouse's own that its snapshot views read files from."""
        own = snapshot_files.folder_of(Path(self.database_path() or "").absolute())
        return sorted({path.parent for path in self.file_index().paths.values()} - {own})

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

    @property
    def files_if_used(self) -> SnapshotFiles | None:
        """`files`, if this session used them (None: it wrote no snapshot file)."""
        return self._files

    # -- transactions -----------------------------------------------------------------------------
    def begin(self) -> None:
        if self.detail_files is not None:
            # Files written outside a transaction were published with their rows already: a
            # rollback of this one must not remove them.
            self.detail_files.sync()
            self.detail_files.committed()
        self.con.execute("BEGIN TRANSACTION")

    def commit(self) -> None:
        """Commit; the snapshot files the transaction's views read are made durable first."""
        if self._files is not None:
            self._files.sync()
        if self.detail_files is not None:
            self.detail_files.sync()
        self.con.execute("COMMIT")
        if self.detail_files is not None:
            self.detail_files.committed()

    def checkpoint(self) -> None:
        """Write everything committed into the file, so freed blocks show as free."""
        self.con.execute("CHECKPOINT")

    def free_bytes(self) -> int:
        from strata_dagster.backends.duckdb.compaction import free_bytes

        return free_bytes(self.con)

    def rollback(self) -> None:
        if self._files is not None:
            self._files.kinds = None  # what the transaction did to the snapshot schema is undone
        self._held.clear()  # temporary tables made in the transaction are gone with it
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # no transaction left to roll back: nothing of it was committed
        if self.detail_files is not None:
            self.detail_files.discard()

    # -- sources ----------------------------------------------------------------------------------
    def prepare_sources(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """Attach source databases, check overrides, and return the schemas of readable sources."""
        source_reading.attach_source_databases(self.con, project)
        source_reading.check_overrides_exist(self.con, overrides)
        return source_reading.source_schemas(self.con, project, overrides)

    def source_schemas(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """The schemas of the sources readable now (their databases attached if they exist)."""
        source_reading.attach_source_databases(self.con, project, is_strict=False)
        return source_reading.source_schemas(self.con, project, overrides)

    def source_file_stamp(self, relation: exp.Table, database: Path) -> FileStamp | None:
        if not source_reading.is_stored_table(self.con, relation):
            return None  # a view may read anything: its file says nothing of its rows
        return database_stamp(database)

    def source_files_stamp(self, pattern: str) -> FileStamp | None:
        return files_stamp(pattern)

    def prune_source_stamps(self) -> int:
        with self.transaction():
            return stamp_records.prune(self.con)

    # -- snapshots and views ----------------------------------------------------------------------
    def create_snapshot(self, name: str, query: exp.Query) -> None:
        with warehouse_errors():
            shared_tables.create_snapshot(self.con, name, query, self.files)

    def create_view_snapshot(self, name: str, query: exp.Query) -> None:
        with warehouse_errors():
            shared_tables.create_view_snapshot(self.con, name, query, self.files)

    def drop_snapshot(self, name: str) -> None:
        shared_tables.drop_table(self.con, name, self.files)

    def rename_snapshot(self, name: str, new_name: str) -> None:
        with warehouse_errors():
            shared_tables.rename_snapshot(self.con, name, new_name, self.files)

    def snapshot_exists(self, name: str) -> bool:
        # The session's kinds: one catalog query for all names (a lookup of one name through
        # DuckDB's catalog functions lists every view, whose count grows with the history).
        return self.files.kind_of(self.con, name) is not None

    def view_tables(self, branch_schema: str, model: str) -> tuple[str, ...] | None:
        return tables.view_snapshot_tables(self.con, branch_schema, model)

    def catalog(self, branch_schema: str) -> DuckDBCatalog:
        """The snapshot tables and the views of a branch as they are now, read in two queries."""
        return DuckDBCatalog(
            frozenset(tables.snapshot_table_names(self.con)),
            tables.view_sqls(self.con, branch_schema),
            self.con,
        )

    def point_view_at(self, branch_schema: str, model: str, query: exp.Query) -> None:
        shared_tables.point_view_at(self.con, branch_schema, model, query)

    def drop_view(self, branch_schema: str, model: str) -> None:
        shared_tables.drop_view(self.con, branch_schema, model)

    # -- delta work tables ------------------------------------------------------------------------
    def create_keys_table(
        self,
        name: str,
        relation: exp.Table | exp.Query,
        keys: Sequence[tuple[str, exp.Expr]],
        window: exp.Expr,
        deleted_from: exp.Query | None,
        merge_keys: Sequence[str],
        reread: tuple[exp.Query, exp.Expr] | None = None,
    ) -> int:
        with warehouse_errors():
            return create_keys_table(
                self.con, name, relation, keys, window, deleted_from, merge_keys, reread, files=self.files
            )

    def key_range(self, name: str, keys: Sequence[str]) -> KeyRange | None:
        """None here: DuckDB prunes a scan with a join's keys itself (segments.keyed_rows)."""
        return None

    def key_bounds(self, name: str, keys: Sequence[str]) -> KeyBounds | None:
        """None here: DuckDB finds a state's replaced rows with a join that costs little when
        there are none (sql.key_bounds)."""
        return None

    # -- held rows and pruning hints --------------------------------------------------------------
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

    def narrow_held(self, key: Hashable, keep: exp.Expr) -> None:
        """Delete from the rows held for `key` those not meeting `keep`: a read of a few held rows
        instead of the scan of a whole state that found them."""
        held = self._held.get(key)
        if held is not None:
            with warehouse_errors():
                run(self.con, exp.Delete(this=held.copy(), where=exp.Where(this=exp.not_(keep.copy()))))

    # -- maintenance ------------------------------------------------------------------------------
    def refresh_serving(self, path: Path) -> serving.ServingState | None:
        """Bring the serving copy up to date now (every write session also does on closing)."""
        return refresh_serving(self.con, path, self.writer.entries_added)

    def snapshot_file_paths(self) -> dict[str, Path]:
        """The immutable Parquet file each snapshot view reads, as the catalog has them now."""
        return dict(snapshot_files.FileIndex.of(snapshot_files.views_over_files(self.con)).paths)

    def collect_files(self, path: Path, grace: float) -> ServingCollection:
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
        details_removed, detail_bytes = (
            self.detail_files.remove_unnamed(self.history.detail_file_names())
            if self.detail_files is not None
            else (0, 0)
        )
        return dataclasses.replace(
            collected,
            snapshot_files_removed=removed.files + details_removed,
            snapshot_bytes_removed=removed.bytes + detail_bytes,
        )

    # -- warehouse facts --------------------------------------------------------------------------
    def has_history(self) -> bool:
        """Whether the history tables exist (a read-only session never creates them)."""
        if self._schema_version is not None:
            return self._schema_version > 0  # history tables are never dropped while a session is open
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


@dataclass
class DuckDBCatalog(CatalogSnapshot):
    """A branch's catalog as DuckDB stored it, its views' SQL parsed by DuckDB's own parser."""

    snapshot_tables: frozenset[str]
    views: dict[str, str]  # view name -> stored SQL
    con: duckdb.DuckDBPyConnection | None = None  # to parse a view's SQL with DuckDB's own parser
    _parsed: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def view_tables(self, model: str) -> tuple[str, ...] | None:
        name = view_name(model)
        if name not in self.views:
            return None
        if name not in self._parsed:
            self._parsed[name] = tables.snapshot_tables_of_view(self.con, self.views[name])
        return self._parsed[name]


def refresh_serving(
    con: duckdb.DuckDBPyConnection, path: Path, published: Collection[int] = ()
) -> serving.ServingState | None:
    """Bring the serving copy readers open up to what this writer published (a no-op when it
    already is); `published`: the entries this session wrote. Every write session ends here, so a
    crash that skipped it is repaired by the next."""
    try:
        return serving.refresh(con, path, on_step=checkpoint, published=published)
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
