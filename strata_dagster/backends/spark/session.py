"""The warehouse Session interface on Spark.

What differs from DuckDB, and how the promises still hold:
- **No transactions.** Snapshot tables are created as the run goes (immutable Parquet tables
  nobody reads until a view points at them). The history is kept in memory (HistoryMirror) and
  published at commit, in an order that keeps each view consistent: the new history rows are
  logged, the live views are repointed one by one with ALTER VIEW (one catalog call, which readers
  never see half done), and the commit marker is written last. A rollback drops what the
  transaction created. A crash between the first and the last step is found by the next session
  (a logged commit without its marker): a writer repoints every view to what the committed history
  says and marks the commit abandoned (backends/spark/repair.py); a reader reports it.
- **Readers** query the live views in Spark itself: no lock keeps them out, and ALTER VIEW never
  fails a concurrent read (docs/spark.md). Superseded snapshots are dropped only after a grace
  period (`strata gc --grace`), so a running query never loses its files.
- **Fingerprints** are Spark's own (backends/spark/statements.py) and never compared with DuckDB's.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import CatalogSnapshot, FileDamage, WarehouseError
from strata_dagster.backends.choice import SPARK_CAPABILITIES
from strata_dagster.backends.duckdb import sources as source_reading
from strata_dagster.backends.duckdb.snapshot_files import problem_of
from strata_dagster.backends.spark import catalog, history_log
from strata_dagster.backends.spark.connection import SparkConnection, spark_errors
from strata_dagster.backends.sql import tables as shared_tables
from strata_dagster.backends.sql.figures import content_and_key_sum_where, content_where, key_sum_and_extremes
from strata_dagster.backends.sql.runner import describe
from strata_dagster.backends.sql.session import SqlSession
from strata_dagster.backends.sql.snapshot_kinds import SnapshotKinds
from strata_dagster.compile.relations import view_name
from strata_dagster.errors import E_BACKEND_UNSUPPORTED, E_WAREHOUSE, StrataError
from strata_dagster.faults import checkpoint
from strata_dagster.language.definition import Project
from strata_dagster.sql import views
from strata_dagster.sql.content import (
    EMPTY_FIGURE,
    WHOLE_ROW,
    Content,
    RowBasis,
    as_rows,
    is_summed,
    row_hash_aggregates,
)
from strata_dagster.sql.key_bounds import KeyBounds
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, snapshot_table
from strata_dagster.sql.segments import (
    KeyRange,
    TypedTexts,
    WindowStats,
    key_extremes,
    keys_query,
    typed_literal,
)
from strata_dagster.state.history import HistoryReader, HistoryWriter
from strata_dagster.state.history_mirror import HistoryMirror

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa

# The steps of a Spark publication, after each of which a crash test kills the driver.
PUBLISH_STEPS = ("spark_history_logged", "spark_view_published", "spark_committed")


class SparkWarehouseSession(SqlSession):
    """One open Spark warehouse, behind the Session interface (backends/base.py)."""

    backend = "spark"
    capabilities = SPARK_CAPABILITIES
    prefers_anti_join = True  # a broadcast anti-join: one scan instead of two

    def __init__(self, con: SparkConnection, warehouse: Path, *, read_only: bool) -> None:
        self.con: SparkConnection = con
        self.warehouse = warehouse
        self.read_only = read_only
        self.mirror = HistoryMirror()
        local_folder = warehouse if con.is_local else None
        log = history_log.read_log(con, local_folder, self.mirror)
        self._has_log = log is not None
        self._log_ready = history_log.tables_exist(con, local_folder, self._has_log)
        committed, self.interrupted = log if log is not None else ([], [])
        self.mirror.load(committed)
        self.meta = self.mirror.con
        self.history = HistoryReader(self.meta)
        self.writer = HistoryWriter(self.meta)
        self._in_transaction = False
        # model views to point at commit, in order; None: a retired model's view, dropped
        self._pending_views: dict[tuple[str, str], exp.Query | None] = {}
        self._created: list[str] = []
        self._views: dict[str, dict[str, str]] = {}
        self._files: _SnapshotKinds | None = None
        self._contents: dict[tuple[str, RowBasis], Content] = {}
        # Keys table, key columns -> its rows with a NULL key (counted when it was created).
        self._null_keys: dict[tuple[str, tuple[str, ...]], int] = {}
        self._key_bounds: dict[tuple[str, tuple[str, ...]], KeyBounds | None] = {}
        # Snapshot table -> (its folder or damaged file, what is wrong), None when whole.
        self._table_problems: dict[str, tuple[Path, str] | None] = {}

    def statement_errors(self) -> AbstractContextManager[None]:
        """Nothing to translate: the connection raises SparkError (a WarehouseError) itself."""
        return nullcontext()

    # -- transactions -----------------------------------------------------------------------------
    def begin(self) -> None:
        self.meta.execute("BEGIN TRANSACTION")
        self._in_transaction = True
        self._pending_views = {}
        self._created = []

    def commit(self) -> None:
        self._publish(self.mirror.new_rows(), self._pending_views)
        self.meta.execute("COMMIT")
        self.mirror.mark_flushed()
        self._in_transaction = False
        self._pending_views = {}
        self._created = []

    def rollback(self) -> None:
        if self._in_transaction:
            try:
                self.meta.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - nothing of it was published
                pass
        for name in reversed(self._created):
            try:
                self._drop(name)
            except WarehouseError:
                pass  # an unpublished table left behind is garbage for gc, never live
        self._in_transaction = False
        self._pending_views = {}
        self._created = []

    def flush(self) -> None:
        """Publish what was written outside a transaction (history rows, views), at close."""
        rows = self.mirror.new_rows()
        if rows or self._pending_views:
            self._publish(rows, self._pending_views)
            self.mirror.mark_flushed()
            self._pending_views = {}

    def _publish(
        self, rows: list[tuple[str, str]], views: Mapping[tuple[str, str], exp.Query | None]
    ) -> None:
        if not rows and not views:
            return
        if self.read_only:
            raise StrataError(E_WAREHOUSE, "a read-only Spark session tried to publish", hint="this is a bug")
        if not self._log_ready:
            history_log.ensure_log(self.con)
            self._log_ready = True
        self._has_log = True
        commit_id = history_log.new_commit_id()
        history_log.append_rows(self.con, commit_id, rows)
        checkpoint("spark_history_logged")
        for (schema, model), query in views.items():
            if query is None:
                self._drop_view(schema, model)
            else:
                self.point_now(schema, model, query)
            checkpoint("spark_view_published")
        history_log.mark(self.con, commit_id, len(rows))
        checkpoint("spark_committed")
        self._contents.clear()  # live views now read other snapshots
        self.con.forget_answers()

    # -- sources ----------------------------------------------------------------------------------
    def prepare_sources(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        _refuse_attached_databases(project)
        source_reading.check_overrides_exist(self.con, overrides)
        return self.source_schemas(project, overrides)

    def source_schemas(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        schemas = {}
        for name, source in project.sources.items():
            try:
                schemas[name] = describe(self.con, source_reading.schema_relation(source, project, overrides))
            except WarehouseError:
                continue
        return schemas

    def content(
        self,
        relation: exp.Table | exp.Query,
        basis: RowBasis = WHOLE_ROW,
        columns: tuple[tuple[str, str], ...] | None = None,
    ) -> Content:
        """A relation's content figures, asked once per session: a run asks for a source's
        several times (its fingerprint, each reader's window), and each answer is a Spark job over
        every row. One answer per run is also what a DuckDB transaction gives."""
        key = (
            self.con.render(relation if isinstance(relation, exp.Query) else exp.select("*").from_(relation)),
            basis,
        )
        if key not in self._contents:
            self._contents[key] = super().content(relation, basis, columns)
        return self._contents[key]

    def content_and_key_sum(
        self, table: exp.Table, columns: Sequence[str]
    ) -> tuple[Content, tuple[int, str]]:
        """As on DuckDB, in one Spark job (a new segment's figures: two jobs of tens of milliseconds
        each, however small the segment)."""
        described = self.describe(table)
        count, hash_sum, key_hash_sum = content_and_key_sum_where(
            self.con, exp.select("*").from_(table), exp.true(), columns
        )
        return Content(described, count, hash_sum), (count, key_hash_sum)

    # -- incremental ------------------------------------------------------------------------------
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
        """As on DuckDB, and the keys with a NULL are counted in the same Spark job (a delta asks
        for both, and each job costs tens of milliseconds however small the table), with the range
        of a single key (key_range)."""
        query = keys_query(relation, keys, window, deleted_from, merge_keys, reread)
        catalog.ensure_schema(self.con, SNAPSHOT_SCHEMA)
        shared_tables.create_snapshot(self.con, name, query, self.files)
        names = tuple(key for key, _ in keys)
        has_null = exp.or_(*(exp.Is(this=exp.column(key), expression=exp.null()) for key in names))
        figures: list[exp.Expr] = [exp.Count(this=exp.Star()), exp.CountIf(this=has_null)]
        if len(names) == 1:
            figures += key_extremes(exp.column(names[0]))
        row = self.con.run_statement(exp.select(*figures).from_(snapshot_table(name))).fetchone()
        assert row is not None
        self._null_keys[(name, names)] = int(row[1])
        if len(names) == 1:
            self._key_bounds[(name, names)] = KeyBounds.of(row[2], row[3], str(row[4]))
        return int(row[0])

    def create_values_table(self, name: str, column: str, values: TypedTexts) -> None:
        """As on DuckDB; its NULL keys are counted from `values` (a Spark job less, when a segment
        of partitions records whether its keys table is free of NULLs)."""
        super().create_values_table(name, column, values)
        self._forget_keys(name)  # a table of that name made before: its counts are not these
        self._null_keys[(name, (column,))] = sum(text is None for text in values.texts)

    def count_null_keys(self, name: str, keys: Sequence[str]) -> int:
        known = self._null_keys.get((name, tuple(keys)))
        return known if known is not None else super().count_null_keys(name, keys)

    def key_range(self, name: str, keys: Sequence[str]) -> KeyRange | None:
        """The keys table's bounds as typed literals, for Parquet to skip row groups outside them."""
        bounds = self.key_bounds(name, keys)
        if bounds is None:
            return None
        return KeyRange(
            typed_literal(bounds.low, bounds.type_name), typed_literal(bounds.high, bounds.type_name)
        )

    def key_bounds(self, name: str, keys: Sequence[str]) -> KeyBounds | None:
        """Read with the keys table's counts when this session created it (None otherwise)."""
        return self._key_bounds.get((name, tuple(keys)))

    def key_sum_and_bounds(
        self, relation: exp.Table | exp.Query, columns: Sequence[str], keys: Sequence[str]
    ) -> tuple[tuple[int, str], KeyBounds | None]:
        """In the one Spark job that reads the keys for `key_sum`."""
        if len(keys) != 1:
            return super().key_sum_and_bounds(relation, columns, keys)
        count, hash_sum, low, high, type_name = key_sum_and_extremes(self.con, relation, columns, keys[0])
        return (count, hash_sum), None if type_name is None else KeyBounds.of(low, high, type_name)

    def _forget_keys(self, name: str) -> None:
        self._null_keys = {key: count for key, count in self._null_keys.items() if key[0] != name}
        self._key_bounds = {key: bounds for key, bounds in self._key_bounds.items() if key[0] != name}

    def window_stats(
        self,
        relation: exp.Table | exp.Query,
        cdc: exp.Expr,
        low: exp.Expr | None,
        lateness: exp.Expr | None,
        totals: tuple[int, str] | None = None,
        basis: RowBasis = WHOLE_ROW,
    ) -> WindowStats:
        """As on DuckDB, with MAX(cdc) and the window's figures read in one Spark job: the rows
        above `low` are the window (low, MAX(cdc)] of the same scan, and its greatest value is
        MAX(cdc) whenever it has a row. With no row above `low` (or no low or totals to take the
        rest from) the figures are read as on DuckDB."""
        if low is None or totals is None:
            return super().window_stats(relation, cdc, low, lateness, totals, basis)
        above_low = exp.GT(this=cdc.copy(), expression=low.copy())
        bound = [
            exp.cast(exp.func("max", cdc.copy()), "VARCHAR"),
            exp.func("typeof", exp.func("max", cdc.copy())),
        ]
        statement = exp.select(*bound, *row_hash_aggregates(basis)).from_(as_rows(relation)).where(above_low)
        row = self.con.run_statement(statement).fetchone()
        if row is None or row[0] is None:
            return super().window_stats(relation, cdc, low, lateness, totals, basis)
        high_text, cdc_type = str(row[0]), str(row[1])
        count, figure = totals
        window = (int(row[2]), str(row[3]))
        above_next = (0, EMPTY_FIGURE)
        if lateness is not None:
            threshold = exp.Sub(this=typed_literal(high_text, cdc_type), expression=lateness.copy())
            above_next = content_where(
                self.con, relation, exp.GT(this=cdc.copy(), expression=threshold), basis
            )
        summed = is_summed(basis)
        return WindowStats(
            high=high_text,
            cdc_type=cdc_type,
            window_rows=window[0],
            old_count=count - window[0],
            old_hash_sum=str(int(figure) - int(window[1])) if summed else None,
            next_count=count - above_next[0],
            next_hash_sum=str(int(figure) - int(above_next[1])) if summed else None,
        )

    # -- snapshots and views ----------------------------------------------------------------------
    @property
    def files(self) -> _SnapshotKinds:
        """No snapshot files of strata's own: a Spark snapshot is a Parquet table (its files are
        Spark's). What each snapshot name is (table or view) is read from the catalog once."""
        if self._files is None:
            self._files = _SnapshotKinds(folder=None, kinds={})
        return self._files

    def _known_snapshots(self) -> set[str]:
        return catalog.snapshot_names(self.con)

    def create_snapshot(self, name: str, query: exp.Query) -> None:
        self._forget_keys(name)
        catalog.ensure_schema(self.con, SNAPSHOT_SCHEMA)
        shared_tables.create_snapshot(self.con, name, query, self.files)
        self._created.append(name)
        self._known_snapshots().add(name)

    def create_view_snapshot(self, name: str, query: exp.Query) -> None:
        self._forget_keys(name)
        catalog.ensure_schema(self.con, SNAPSHOT_SCHEMA)
        shared_tables.create_view_snapshot(self.con, name, query, self.files)
        self._created.append(name)
        self._known_snapshots().add(name)

    def _drop(self, name: str) -> None:
        self._forget_keys(name)
        shared_tables.drop_table(self.con, name, self.files)
        self._known_snapshots().discard(name)

    def drop_snapshot(self, name: str) -> None:
        self._drop(name)

    def rename_snapshot(self, name: str, new_name: str) -> None:
        self._forget_keys(name)
        self._forget_keys(new_name)
        shared_tables.rename_snapshot(self.con, name, new_name, self.files)
        self._created = [new_name if created == name else created for created in self._created]
        known = self._known_snapshots()
        known.discard(name)
        known.add(new_name)

    def snapshot_exists(self, name: str) -> bool:
        return name in self._known_snapshots()

    def damaged_files(self, tables: Iterable[str]) -> list[FileDamage]:
        """The snapshot tables of `tables` (and those named after them, `<table>__...`) whose folder
        is gone or holds a part file that is no whole Parquet file. Only a local Spark's folders
        can be looked at: on Spark Connect, Spark finds them when it reads them."""
        if not self.con.is_local:
            return []
        known = sorted(self._known_snapshots())
        found = []
        for table in sorted(set(tables)):
            start = bisect.bisect_left(known, f"{table}__")
            names = [table, *(name for name in known[start:] if name.startswith(f"{table}__"))]
            for name in names:
                if name not in self._table_problems:
                    problem = _table_problem(self._table_folder(name))
                    # A view model's snapshot has no folder: the catalog's views are listed only
                    # then, so a run over whole tables asks Spark for no listing of views.
                    if problem is not None and not problem[0].exists():
                        if self.files.kind_of(self.con, name) != "table":
                            problem = None
                    self._table_problems[name] = problem
                problem = self._table_problems[name]
                if problem is not None:
                    found.append(FileDamage(name, problem[0], problem[1]))
        return found

    def _table_folder(self, name: str) -> Path:
        """Where a local Spark keeps a snapshot table's files (its managed table location)."""
        return self.warehouse / f"{SNAPSHOT_SCHEMA}.db" / name.lower()

    def _view_sqls(self, branch_schema: str) -> dict[str, str]:
        if branch_schema not in self._views:
            self._views[branch_schema] = catalog.view_texts(self.con, branch_schema)
        return self._views[branch_schema]

    def view_tables(self, branch_schema: str, model: str) -> tuple[str, ...] | None:
        if (branch_schema, model) in self._pending_views:
            pending = self._pending_views[(branch_schema, model)]
            return None if pending is None else views.tables_of_view(pending.sql(dialect="duckdb"))
        sql = self._view_sqls(branch_schema).get(views.view_table(branch_schema, model).name)
        return None if sql is None else views.tables_of_view(sql, dialect="spark")

    def catalog(self, branch_schema: str) -> SparkCatalog:
        return SparkCatalog(frozenset(self._known_snapshots()), dict(self._view_sqls(branch_schema)))

    def point_view_at(self, branch_schema: str, model: str, query: exp.Query) -> None:
        """Repoint at commit (in the order views were pointed), or now outside a transaction."""
        if self._in_transaction:
            self._pending_views[(branch_schema, model)] = query
        else:
            self._pending_views[(branch_schema, model)] = query
            self.flush()

    def drop_view(self, branch_schema: str, model: str) -> None:
        """Drop at commit (in the order views were pointed), or now outside a transaction."""
        self._pending_views[(branch_schema, model)] = None
        if not self._in_transaction:
            self.flush()

    def _drop_view(self, branch_schema: str, model: str) -> None:
        view = views.view_table(branch_schema, model)
        self.con.run_statement(exp.Drop(tables=[view], kind="VIEW", exists=True))
        self._view_sqls(branch_schema).pop(view.name, None)

    def point_now(self, branch_schema: str, model: str, query: exp.Query) -> None:
        """Repoint a model's live view at once, outside any publication (a publication and the
        repair of one cut short, backends/spark/repair.py)."""
        catalog.ensure_schema(self.con, branch_schema)
        view = views.view_table(branch_schema, model)
        existing = self._view_sqls(branch_schema)
        # ALTER VIEW is one catalog call: a reader sees the old or the new query, never no view
        # (CREATE OR REPLACE VIEW drops first; readers then fail).
        if view.name in existing:
            statement: exp.Expr = exp.Alter(this=view, kind="VIEW", actions=[query])
        else:
            statement = exp.Create(this=view, kind="VIEW", expression=query)
        self.con.run_statement(statement)
        existing[view.name] = self.con.render(query)

    def has_history(self) -> bool:
        return self._has_log

    def database_name(self) -> str:
        return "spark_catalog"

    def database_path(self) -> str | None:
        return None  # no warehouse file: source listings are not cached

    def schema_has_tables(self, schema: str) -> bool:
        """Whether database `schema` holds tables (its views are a branch's, not counted)."""
        tables = catalog.names(self.con, schema)
        return bool(tables and tables - catalog.names(self.con, schema, "VIEWS"))

    def held_rows(self, key: Hashable, query: Callable[[], exp.Query]) -> exp.Table | exp.Query:
        """Not kept here: each statement reads the query again (Spark plans it lazily anyway)."""
        return query()

    def forget_held(self, key: Hashable) -> None:
        pass  # nothing is held

    def narrow_held(self, key: Hashable, keep: exp.Expr) -> None:
        pass  # nothing is held

    def share_read_by_ranges(
        self, tables: Sequence[str], column: str, type_name: str, runs: Sequence[tuple[date, date]]
    ) -> float | None:
        return None  # the tables' statistics are not read here: the key match stays

    def read_arrow(self, query: exp.Query) -> pa.Table:
        with spark_errors():
            return self.con.spark.sql(self.con.render(query)).toArrow()

    def register_frame(self, name: str, frame: pa.Table) -> None:
        with spark_errors():
            self.con.spark.createDataFrame(_signed(frame)).createOrReplaceTempView(name)

    def unregister_frame(self, name: str) -> None:
        with spark_errors():
            self.con.spark.catalog.dropTempView(name)

    def export_rows(self, relation: exp.Table | exp.Query, path: Path, file_format: str) -> int:
        """Every row, through Arrow, into one local Parquet or CSV file (Spark's own writers
        would give a folder of part files)."""
        import pyarrow.csv
        import pyarrow.parquet

        source = relation.subquery("__exported") if isinstance(relation, exp.Query) else relation.copy()
        with spark_errors():
            table = self.con.spark.sql(self.con.render(exp.select("*").from_(source))).toArrow()
        if file_format == "csv":
            pyarrow.csv.write_csv(table, str(path))
        else:
            pyarrow.parquet.write_table(table, str(path))
        return table.num_rows

    def close(self) -> None:
        self.con.drop_file_views()
        self.mirror.close()


def _table_problem(folder: Path) -> tuple[Path, str] | None:
    """Why a Parquet table's files cannot be read, and which: its folder gone, or a part file that
    is no whole Parquet file (cut short, overwritten)."""
    if not folder.is_dir():
        return folder, "missing"
    for part in sorted(folder.iterdir()):
        if part.name.startswith(("part-", "part_")) or part.suffix == ".parquet":
            problem = problem_of(part)
            if problem is not None:
                return part, problem
    return None


@dataclass
class _SnapshotKinds(SnapshotKinds):
    """What each snapshot name is, asked of the catalog only when needed: a name the snapshot
    schema does not hold (every new snapshot's) is none, with no call; the schema's views are
    listed once, the first time a name it holds is asked about. Kept up to date by the session's
    own writes, as DuckDB's (only the writer changes the snapshot schema)."""

    views: set[str] | None = None
    dropped: set[str] = field(default_factory=set)  # by this session, whatever the listing said

    def kind_of(self, con: SparkConnection, name: str) -> str | None:
        assert self.kinds is not None
        if name in self.kinds or name in self.dropped:
            return self.kinds.get(name)
        if name not in catalog.snapshot_names(con):
            return None
        if self.views is None:
            self.views = catalog.names(con, SNAPSHOT_SCHEMA, "VIEWS")
        self.kinds[name] = "view" if name in self.views else "table"
        return self.kinds[name]

    def set_kind(self, name: str, kind: str | None) -> None:
        super().set_kind(name, kind)
        if kind is None:
            self.dropped.add(name)
        else:
            self.dropped.discard(name)


@dataclass
class SparkCatalog(CatalogSnapshot):
    """A branch's catalog as Spark stored it: its views' SQL is Spark's."""

    snapshot_tables: frozenset[str]
    views: dict[str, str]  # view name -> stored SQL
    _parsed: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def view_tables(self, model: str) -> tuple[str, ...] | None:
        name = view_name(model)
        if name not in self.views:
            return None
        if name not in self._parsed:
            self._parsed[name] = views.tables_of_view(self.views[name], dialect="spark")
        return self._parsed[name]


def _refuse_attached_databases(project: Project) -> None:
    for source in project.sources.values():
        if source.database is not None:
            raise StrataError(
                E_BACKEND_UNSUPPORTED,
                f"source `{source.name}` reads a DuckDB database file (`database: {source.database}`), "
                "which the Spark backend cannot attach",
                source.location,
                hint="load the table into the Spark catalog and name it with `table:`, or run on DuckDB",
            )


def _signed(frame: pa.Table) -> pa.Table:
    """Spark has no unsigned integers (polars counts are UInt32): each becomes the signed type that
    holds every value of it, the way DuckDB reads them into its own columns."""
    import pyarrow as pa

    wider = {
        pa.uint8(): pa.int16(),
        pa.uint16(): pa.int32(),
        pa.uint32(): pa.int64(),
        pa.uint64(): pa.decimal128(20, 0),
    }
    fields = [field.with_type(wider[field.type]) if field.type in wider else field for field in frame.schema]
    return frame.cast(pa.schema(fields)) if fields != list(frame.schema) else frame
