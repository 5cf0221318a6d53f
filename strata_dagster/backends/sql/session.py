"""The Session methods both SQL backends answer with the same statements, written once.

DuckDB and Spark both run sqlglot trees through their connection (`con`: DuckDB's own, or Spark's
SqlRunner, which renders them in its dialect) and keep a cache of what each snapshot name is
(`files`). What one statement or a few compute the same way on both is here; a backend overrides
a method only to answer it differently (Spark's caches and one-job figures wrap these bodies),
and what only one backend does lives in its own session class.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.backends.sql import figures, key_figures, tables
from strata_dagster.backends.sql.runner import Connection, describe, is_duckdb, run
from strata_dagster.backends.sql.snapshot_kinds import SnapshotKinds
from strata_dagster.sql.content import WHOLE_ROW, Content, RowBasis
from strata_dagster.sql.segments import Segment, TypedTexts, WindowStats, composite_query
from strata_dagster.sql.views import PinViolation
from strata_dagster.state.ledger import PartitionEvidence

if TYPE_CHECKING:
    from strata_dagster.sql.key_bounds import KeyBounds


class SqlSession(Session):
    """A Session over a SQL connection: the figures, pins and reads both backends share."""

    con: Connection

    @property
    @abstractmethod
    def files(self) -> SnapshotKinds:
        """What each snapshot name is, kept by this session (and where it writes snapshot files)."""

    @abstractmethod
    def statement_errors(self) -> AbstractContextManager[None]:
        """Around each shared statement: the backend's failures as WarehouseError."""

    # -- sources ----------------------------------------------------------------------------------
    def partition_evidence(self, relation: exp.Table, key: exp.Expr, column: str) -> list[PartitionEvidence]:
        return figures.list_table_partitions(self.con, relation, key, column)

    def describe(self, relation: exp.Table | exp.Query) -> tuple[tuple[str, str], ...]:
        with self.statement_errors():
            return describe(self.con, relation)

    def content(
        self,
        relation: exp.Table | exp.Query,
        basis: RowBasis = WHOLE_ROW,
        columns: tuple[tuple[str, str], ...] | None = None,
    ) -> Content:
        with self.statement_errors():
            return figures.content_of(self.con, relation, basis, columns)

    # -- figures ----------------------------------------------------------------------------------
    def content_by_group(
        self, relation: exp.Table | exp.Query, key: exp.Expr, basis: RowBasis = WHOLE_ROW
    ) -> dict[str | None, tuple[int, str]]:
        with self.statement_errors():
            return figures.content_by_group(self.con, relation, key, basis)

    def content_by_groups(
        self, relation: exp.Table | exp.Query, keys: Sequence[exp.Expr], limit: int | None = None
    ) -> dict[tuple[str | None, ...], tuple[int, str]]:
        with self.statement_errors():
            return figures.content_by_groups(self.con, relation, keys, limit=limit)

    def content_where(
        self, relation: exp.Table | exp.Query, condition: exp.Expr | None = None
    ) -> tuple[int, str]:
        with self.statement_errors():
            return figures.content_where(self.con, relation, condition)

    def content_and_key_sum_where(
        self, query: exp.Query, condition: exp.Expr, columns: Sequence[str]
    ) -> tuple[int, str, str]:
        with self.statement_errors():
            return figures.content_and_key_sum_where(self.con, query, condition, columns)

    def content_and_key_sum(
        self, table: exp.Table, columns: Sequence[str]
    ) -> tuple[Content, tuple[int, str]]:
        """A table's content and its `key_sum` over `columns`."""
        return self.content(table), self.key_sum(table, columns)

    def key_sum(self, relation: exp.Table | exp.Query, columns: Sequence[str]) -> tuple[int, str]:
        with self.statement_errors():
            return figures.key_sum(self.con, relation, columns)

    def key_sum_and_bounds(
        self, relation: exp.Table | exp.Query, columns: Sequence[str], keys: Sequence[str]
    ) -> tuple[tuple[int, str], KeyBounds | None]:
        """`key_sum`, and no bounds (a backend that records them answers both in one scan)."""
        return self.key_sum(relation, columns), None

    def counts_at_or_below(
        self, relation: exp.Table | exp.Query, column: exp.Expr, bounds: Sequence[exp.Expr]
    ) -> list[int]:
        with self.statement_errors():
            return figures.counts_at_or_below(self.con, relation, column, bounds)

    def max_value(self, relation: exp.Table | exp.Query, column: str) -> tuple[str | None, str]:
        with self.statement_errors():
            return figures.max_value(self.con, relation, column)

    def window_stats(
        self,
        relation: exp.Table | exp.Query,
        cdc: exp.Expr,
        low: exp.Expr | None,
        lateness: exp.Expr | None,
        totals: tuple[int, str] | None = None,
        basis: RowBasis = WHOLE_ROW,
    ) -> WindowStats:
        with self.statement_errors():
            return figures.window_stats(self.con, relation, cdc, low, lateness, totals, basis)

    # -- views ------------------------------------------------------------------------------------
    def point_view(self, branch_schema: str, model: str, table_names: Sequence[str]) -> None:
        self.point_view_at(branch_schema, model, composite_query([Segment(name) for name in table_names]))

    # -- delta work tables ------------------------------------------------------------------------
    def create_values_table(self, name: str, column: str, values: TypedTexts) -> None:
        with self.statement_errors():
            figures.create_values_table(self.con, name, column, values, self.files)

    def count_null_keys(self, name: str, keys: Sequence[str]) -> int:
        with self.statement_errors():
            return figures.count_null_keys(self.con, name, keys)

    def create_key_figures(self, name: str, relation: exp.Table | exp.Query, keys: Sequence[str]) -> None:
        with self.statement_errors():
            key_figures.create_key_figures(self.con, name, relation, keys, self.files)

    def create_changed_keys(self, name: str, before: str, after: str, keys: Sequence[str]) -> int:
        with self.statement_errors():
            return key_figures.create_changed_keys(self.con, name, before, after, keys, self.files)

    def partitions_meeting(
        self,
        relation: exp.Table | exp.Query,
        partition: exp.Expr,
        values: Sequence[exp.Expr],
        keys_table: str,
        keys: Sequence[str],
    ) -> set[str | None]:
        with self.statement_errors():
            return key_figures.partitions_meeting(self.con, relation, partition, values, keys_table, keys)

    # -- pins -------------------------------------------------------------------------------------
    def unique_violation(self, relation: str | exp.Query, columns: Sequence[str]) -> PinViolation | None:
        with self.statement_errors():
            return tables.unique_violation(self.con, relation, columns)

    def contract_violation(self, name: str, contract: Sequence[tuple[str, str, bool]]) -> PinViolation | None:
        with self.statement_errors():
            return tables.contract_violation(self.con, name, contract)

    # -- rows out ---------------------------------------------------------------------------------
    def read_rows(
        self, relation: exp.Table | exp.Query, limit: int | None = None
    ) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
        """A relation's columns and its rows (the first `limit` of them), as Python values. DuckDB
        names the columns' types with the rows (as DESCRIBE does); another backend is asked."""
        source = relation.subquery("__shown") if isinstance(relation, exp.Query) else relation.copy()
        query = exp.select("*").from_(source)
        if limit is not None:
            query = query.limit(limit)
        with self.statement_errors():
            result = run(self.con, query)
            if is_duckdb(self.con):
                columns = tuple((str(column[0]), str(column[1])) for column in result.description)
            else:
                columns = describe(self.con, relation)
            rows = [tuple(row) for row in result.fetchall()]
        return columns, rows


def connection_of(session: Session) -> Connection:
    """The SQL connection under `session`, for the helpers that run statements of their own (pins,
    compare, partition figures). Both backends' sessions are SqlSessions."""
    if not isinstance(session, SqlSession):
        raise TypeError(f"{type(session).__name__} runs no SQL statements")
    return session.con
