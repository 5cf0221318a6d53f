"""What a backend provides: the Session interface the engine builds through, and its values.

The engine never knows which backend it talks to. It opens a `Session` (backends/opening.py) and
asks it for figures, snapshots, views and history; a backend answers in its own SQL and storage.
What differs between backends and must be decided before a session opens (is the warehouse one
file? do readers read a serving copy?) is a `Capabilities` value (backends/choice.py), never a test of the backend's
name. Both SQL backends share their statements on purpose through `backends/sql/session.py`
(`SqlSession`); nothing here is DuckDB's or Spark's.

The history store (`meta`, `history`, `writer`) is DuckDB on every backend: the warehouse file
itself on DuckDB, an in-memory mirror of a logged history on Spark (state/history_mirror.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from sqlglot import exp

from strata_dagster.backends.choice import Capabilities
from strata_dagster.backends.file_stamps import FileStamp

if TYPE_CHECKING:  # annotations only: none of these is loaded by the interface itself
    import duckdb
    import pyarrow as pa

    from strata_dagster.language.definition import Project
    from strata_dagster.sql.content import Content, RowBasis
    from strata_dagster.sql.key_bounds import KeyBounds
    from strata_dagster.sql.segments import KeyRange, TypedTexts, WindowStats
    from strata_dagster.sql.views import PinViolation
    from strata_dagster.state.history import HistoryReader, HistoryWriter
    from strata_dagster.state.ledger import PartitionEvidence

_WHOLE_ROW: tuple[str, ...] = ()  # sql.content.WHOLE_ROW: every column of every row


class WarehouseError(Exception):
    """The backend refused a statement; `str()` is its first message line."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self._missing = missing

    @property
    def is_missing_relation(self) -> bool:
        """A table, view or file it reads does not exist (yet), as opposed to a statement refused."""
        return self._missing


class ResourceLimitExceeded(WarehouseError):
    """The backend ran out of its memory limit or its spill space; `setting` names the one to raise."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True)
class FileDamage:
    """A snapshot whose file cannot be read: the snapshot, its file, and what is wrong with it."""

    snapshot: str
    path: Path
    problem: str


@dataclass(frozen=True)
class ServingCollection:
    """What `Session.collect_files` removed: retired serving catalogs, their files, and the
    snapshot files nothing reads any more."""

    catalogs_removed: int
    files_removed: int
    bytes_removed: int
    # The snapshot files (snapshot_files.py) the kept catalogs read: gc keeps them for the readers.
    kept_snapshot_files: frozenset[str] = frozenset()
    # Filled in by Session.collect_files: the snapshot files nothing read any more, removed.
    snapshot_files_removed: int = 0
    snapshot_bytes_removed: int = 0
    # A kept catalog's manifest could not be read: what it reads is unknown, so no file is removed.
    keeps_every_file: bool = False


class Rows(Protocol):
    """The rows of one statement."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class SqlRunner(Protocol):
    """A connection of a backend other than DuckDB as the shared SQL sees it (backends.sql.runner.run):
    sqlglot trees in, rendered in its own dialect; rows out as tuples, types as DuckDB spells them."""

    dialect: str

    def run_statement(
        self, statement: exp.Expr, params: Sequence[Any] | None = None, *, consume: bool = False
    ) -> Rows: ...

    def canonical_type(self, type_text: str) -> str: ...


class CatalogSnapshot(ABC):
    """What the catalog held when read: for questions asked many times in one run about the state
    it started from (never about what the run itself writes)."""

    snapshot_tables: frozenset[str]
    views: dict[str, str]  # view name -> stored SQL, in the backend's dialect

    @abstractmethod
    def view_tables(self, model: str) -> tuple[str, ...] | None:
        """Like Session.view_tables, for the branch the snapshot was read on."""


class Session(ABC):
    """One open warehouse, as the engine sees it: transactions, sources, content figures, snapshots,
    views, delta work tables, pins, rows out, and the history. Relations are sqlglot trees; every
    refusal of the backend is a WarehouseError."""

    backend: ClassVar[str]  # the backend's name, also the dialect models are compiled for
    capabilities: ClassVar[Capabilities]
    # Whether one scan under a NULL-safe anti-join costs less than two scans under a plain
    # semi-join (engine.builds.incremental's kept-rows check).
    prefers_anti_join: ClassVar[bool] = False
    # Publications a crash cut short, found when the session opened (a backend whose one
    # transaction publishes all or nothing never has any).
    interrupted: list[Any] = []
    # The history store, DuckDB on every backend (see the module docstring).
    meta: duckdb.DuckDBPyConnection
    history: HistoryReader
    writer: HistoryWriter

    # -- transactions -----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together or not at all."""
        self.begin()
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        self.commit()

    @abstractmethod
    def begin(self) -> None: ...

    @abstractmethod
    def commit(self) -> None:
        """Publish what the transaction wrote (history rows, views), all or nothing."""

    @abstractmethod
    def rollback(self) -> None:
        """Undo the transaction; what it created is dropped or left as garbage no view reads."""

    # -- sources ----------------------------------------------------------------------------------
    @abstractmethod
    def prepare_sources(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """Make `project`'s sources readable, check `overrides` name existing tables, and return
        the schemas of the sources that can be read now."""

    @abstractmethod
    def source_schemas(
        self, project: Project, overrides: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """(column, type) of every source that can be read now; unreadable ones are left out."""

    def source_file_stamp(self, relation: exp.Table, database: Path) -> FileStamp | None:
        """The stamp of `database`, the file a source's `relation` is read from, where every row of
        the relation is stored in that file (a table, not a view over other data); None where the
        backend cannot tell."""
        return None

    def source_files_stamp(self, pattern: str) -> FileStamp | None:
        """The stamp of every file a `path:` source's `pattern` can read; None where the backend
        cannot tell."""
        return None

    def prune_source_stamps(self) -> int:
        """Delete every record of a source scan but the newest of each source, relation and engine
        (the one a read takes), in a transaction of its own; how many went. A backend that records
        none (its history an append-only log) has none to prune."""
        return 0

    @abstractmethod
    def partition_evidence(self, relation: exp.Table, key: exp.Expr, column: str) -> list[PartitionEvidence]:
        """A partitioned table source's partitions (`key`: the partition of a row), each with its
        row count and the range of `column` as evidence, read from that column alone."""

    @abstractmethod
    def describe(self, relation: exp.Table | exp.Query) -> tuple[tuple[str, str], ...]:
        """(column, type as DuckDB spells it) of a relation."""

    @abstractmethod
    def content(
        self,
        relation: exp.Table | exp.Query,
        basis: RowBasis = _WHOLE_ROW,
        columns: tuple[tuple[str, str], ...] | None = None,
    ) -> Content:
        """A relation's content figures (`columns`: its description, when known already)."""

    # -- figures ----------------------------------------------------------------------------------
    @abstractmethod
    def content_by_group(
        self, relation: exp.Table | exp.Query, key: exp.Expr, basis: RowBasis = _WHOLE_ROW
    ) -> dict[str | None, tuple[int, str]]:
        """Row count and row-hash sum per value of `key`, keyed by the value as text."""

    @abstractmethod
    def content_by_groups(
        self, relation: exp.Table | exp.Query, keys: Sequence[exp.Expr], limit: int | None = None
    ) -> dict[tuple[str | None, ...], tuple[int, str]]:
        """`content_by_group` over several keys (at most `limit` combinations)."""

    @abstractmethod
    def content_where(
        self, relation: exp.Table | exp.Query, condition: exp.Expr | None = None
    ) -> tuple[int, str]:
        """Row count and row-hash sum of the rows meeting `condition`."""

    @abstractmethod
    def content_and_key_sum_where(
        self, query: exp.Query, condition: exp.Expr, columns: Sequence[str]
    ) -> tuple[int, str, str]:
        """`content_where`, and the sum of a hash of `columns` over the same rows."""

    @abstractmethod
    def content_and_key_sum(
        self, table: exp.Table, columns: Sequence[str]
    ) -> tuple[Content, tuple[int, str]]:
        """A table's content and its `key_sum` over `columns`."""

    def content_and_key_figures(
        self, table: exp.Table, columns: Sequence[str], keys: Sequence[str]
    ) -> tuple[Content, tuple[int, str], KeyBounds | None]:
        """A table's content, and its `key_sum_and_bounds` (a backend may read both in one scan)."""
        return (self.content(table), *self.key_sum_and_bounds(table, columns, keys))

    @abstractmethod
    def key_sum(self, relation: exp.Table | exp.Query, columns: Sequence[str]) -> tuple[int, str]:
        """Row count and the sum of a hash of only `columns`."""

    @abstractmethod
    def key_sum_and_bounds(
        self, relation: exp.Table | exp.Query, columns: Sequence[str], keys: Sequence[str]
    ) -> tuple[tuple[int, str], KeyBounds | None]:
        """`key_sum`, and the bounds of the one key in `keys` where the backend records them."""

    @abstractmethod
    def counts_at_or_below(
        self, relation: exp.Table | exp.Query, column: exp.Expr, bounds: Sequence[exp.Expr]
    ) -> list[int]:
        """How many rows have `column` at or below each bound, in one scan."""

    @abstractmethod
    def max_value(self, relation: exp.Table | exp.Query, column: str) -> tuple[str | None, str]:
        """MAX(column) as text, with its type."""

    @abstractmethod
    def window_stats(
        self,
        relation: exp.Table | exp.Query,
        cdc: exp.Expr,
        low: exp.Expr | None,
        lateness: exp.Expr | None,
        totals: tuple[int, str] | None = None,
        basis: RowBasis = _WHOLE_ROW,
    ) -> WindowStats:
        """The frozen upper bound of a change column, the window (low, high] and what is outside it."""

    # -- snapshots and views ----------------------------------------------------------------------
    @abstractmethod
    def create_snapshot(self, name: str, query: exp.Query) -> None:
        """Write a new immutable snapshot of `query`'s rows (`query` is consumed)."""

    @abstractmethod
    def create_view_snapshot(self, name: str, query: exp.Query) -> None:
        """A `materialize: view` model's snapshot: an immutable view over its inputs."""

    @abstractmethod
    def drop_snapshot(self, name: str) -> None: ...

    @abstractmethod
    def rename_snapshot(self, name: str, new_name: str) -> None:
        """Rename a snapshot a build is still writing (never a published one)."""

    @abstractmethod
    def snapshot_exists(self, name: str) -> bool: ...

    @abstractmethod
    def damaged_files(self, tables: Iterable[str]) -> list[FileDamage]:
        """The snapshots of `tables` (and those named after them) whose files cannot be read."""

    @abstractmethod
    def view_tables(self, branch_schema: str, model: str) -> tuple[str, ...] | None:
        """The snapshot tables a live view reads now; None when there is no view."""

    @abstractmethod
    def catalog(self, branch_schema: str) -> CatalogSnapshot:
        """The snapshot tables and the views of a branch as they are now."""

    @abstractmethod
    def point_view(self, branch_schema: str, model: str, table_names: Sequence[str]) -> None:
        """Point a model's live view at the composite of `table_names` (segments, in order)."""

    @abstractmethod
    def point_view_at(self, branch_schema: str, model: str, query: exp.Query) -> None:
        """Point a model's live view at `query` (consumed)."""

    @abstractmethod
    def drop_view(self, branch_schema: str, model: str) -> None:
        """Remove a model's live view (a retired model's), if it exists."""

    # -- delta work tables ------------------------------------------------------------------------
    @abstractmethod
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
        """The keys a delta replaces, as a table; how many."""

    @abstractmethod
    def create_values_table(self, name: str, column: str, values: TypedTexts) -> None:
        """A one-column table holding `values`."""

    @abstractmethod
    def count_null_keys(self, name: str, keys: Sequence[str]) -> int: ...

    @abstractmethod
    def key_range(self, name: str, keys: Sequence[str]) -> KeyRange | None:
        """The range of a keys table's one key as literals to read beside the key match, where the
        backend's scans need it to skip what lies outside (None: it prunes by the join itself)."""

    @abstractmethod
    def key_bounds(self, name: str, keys: Sequence[str]) -> KeyBounds | None:
        """The least and greatest key of a keys table of one key, where the backend records them."""

    @abstractmethod
    def create_key_figures(self, name: str, relation: exp.Table | exp.Query, keys: Sequence[str]) -> None:
        """Per key of `relation`, its rows' figures, as a table (joined inputs)."""

    @abstractmethod
    def create_changed_keys(self, name: str, before: str, after: str, keys: Sequence[str]) -> int:
        """The keys whose figures differ between two key-figure tables, as a table; how many."""

    @abstractmethod
    def partitions_meeting(
        self,
        relation: exp.Table | exp.Query,
        partition: exp.Expr,
        values: Sequence[exp.Expr],
        keys_table: str,
        keys: Sequence[str],
    ) -> set[str | None]:
        """The partitions of `relation` holding a row whose keys the keys table lists."""

    # -- held rows and pruning hints --------------------------------------------------------------
    @abstractmethod
    def held_rows(self, key: Hashable, query: Callable[[], exp.Query]) -> exp.Table | exp.Query:
        """The rows of `query()`, kept for the rest of the session where the backend keeps them
        (`key` names everything they depend on); else the query itself."""

    @abstractmethod
    def forget_held(self, key: Hashable) -> None:
        """Drop the rows held for `key` (what they were read from is about to change)."""

    @abstractmethod
    def narrow_held(self, key: Hashable, keep: exp.Expr) -> None:
        """Keep, of the rows held for `key`, those meeting `keep` (never NULL; over the rows'
        unqualified columns): what they were read for narrowed to fewer keys. Nothing held: a
        no-op."""

    @abstractmethod
    def share_read_by_ranges(
        self, tables: Sequence[str], column: str, type_name: str, runs: Sequence[tuple[date, date]]
    ) -> float | None:
        """The share of the snapshots' rows a read of `column` in `runs` cannot skip (None: unknown)."""

    # -- pins -------------------------------------------------------------------------------------
    @abstractmethod
    def unique_violation(self, relation: str | exp.Query, columns: Sequence[str]) -> PinViolation | None:
        """Duplicate values of `columns` in a snapshot (by name) or a query's rows."""

    @abstractmethod
    def contract_violation(self, name: str, contract: Sequence[tuple[str, str, bool]]) -> PinViolation | None:
        """How a snapshot breaks `contract`, a list of (column, type, is_not_null)."""

    # -- rows out and frames ----------------------------------------------------------------------
    @abstractmethod
    def read_rows(
        self, relation: exp.Table | exp.Query, limit: int | None = None
    ) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
        """A relation's columns and its rows (the first `limit`), as Python values."""

    @abstractmethod
    def read_arrow(self, query: exp.Query) -> pa.Table:
        """A query's rows as an Arrow table (for frames handed to Python code)."""

    @abstractmethod
    def register_frame(self, name: str, frame: pa.Table) -> None:
        """An Arrow table readable as relation `name` until `unregister_frame`."""

    @abstractmethod
    def unregister_frame(self, name: str) -> None: ...

    @abstractmethod
    def export_rows(self, relation: exp.Table | exp.Query, path: Path, file_format: str) -> int:
        """Every row of a relation into one local Parquet or CSV file; the row count."""

    # -- warehouse facts --------------------------------------------------------------------------
    @abstractmethod
    def has_history(self) -> bool:
        """Whether the history exists (a read-only session never creates it)."""

    @abstractmethod
    def database_name(self) -> str:
        """The catalog name the warehouse's relations are qualified with."""

    @abstractmethod
    def database_path(self) -> str | None:
        """The warehouse's file (None: no file, e.g. in memory or not a file backend)."""

    @abstractmethod
    def schema_has_tables(self, schema: str) -> bool:
        """Whether schema `schema` holds tables."""

    # -- maintenance: neutral defaults for a backend with no file of its own ----------------------
    def checkpoint(self) -> None:
        """Fold what is committed into the warehouse's file, so freed space shows (no file: nothing)."""
        return None

    def free_bytes(self) -> int:
        """Free space inside the warehouse's file (no file: 0)."""
        return 0

    def refresh_serving(self, path: Path) -> object | None:
        """Bring the serving copy up to date now (no serving copy: readers query the live views,
        nothing to do)."""
        return None

    def snapshot_file_paths(self) -> dict[str, Path]:
        """The immutable Parquet file each snapshot reads, by snapshot table (none here: every
        snapshot is a table)."""
        return {}

    def collect_files(self, path: Path, grace: float) -> ServingCollection:
        """Remove the files of strata's own no snapshot or kept serving catalog reads (none here)."""
        return ServingCollection(0, 0, 0)


class Opener(Protocol):
    """How a backend opens its sessions (backends/opening.py finds it by module path)."""

    def __call__(
        self,
        path: Path,
        choice: Any,
        *,
        read_only: bool = False,
        must_exist: bool = False,
        timeout: float | None = None,
    ) -> AbstractContextManager[Session]: ...
