"""The history of a backend without transactions, read into an in-memory DuckDB of the same tables.

An engine like Spark keeps the history as an append-only log of rows (table, row as JSON). A
session reads the committed rows once into an in-memory DuckDB migrated like any warehouse, so the
same HistoryReader and HistoryWriter (and the ledger) serve every engine, with transactions: what
a run writes is visible to its own reads, and vanishes if it rolls back. At the engine's commit,
the rows appended since the load are handed back (as JSON, in insertion order) for the engine to
append to its log.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable

import duckdb
import sqlglot
from sqlglot import exp

from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.sql.render import DIALECT, render, table
from strata_dagster.state.migrations import HISTORY_SCHEMA, migrate

# (table name in the history schema, the row as a JSON object), in the order they were written.
LogRow = tuple[str, str]


class HistoryMirror:
    """An in-memory copy of the history tables, loaded from log rows."""

    def __init__(self, rows: Iterable[LogRow] = ()) -> None:
        self.con = connect_in_memory()
        migrate(self.con)
        self._tables = self._history_tables()
        # The tables start empty: what was loaded is what each holds.
        self._loaded = self._load(rows)

    def load(self, rows: Iterable[LogRow]) -> None:
        """Load the log's rows into a mirror created empty (before anything is written to it):
        the log can then be read through the mirror's own connection (`read_log_files(..., con)`)."""
        assert not any(self._loaded.values()), "a mirror is loaded once, when created empty"
        self._loaded = self._load(rows)

    def _history_tables(self) -> dict[str, dict[str, str]]:
        """Each history table (not views, not the schema version) -> its columns and types."""
        rows = self.con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE schema_name = ? AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE schema_name = ?) "
            "AND table_name <> 'schema_version' ORDER BY table_name, column_index",
            [HISTORY_SCHEMA, HISTORY_SCHEMA],
        ).fetchall()
        tables: dict[str, dict[str, str]] = defaultdict(dict)
        for name, column, data_type in rows:
            tables[name][column] = data_type
        return dict(tables)

    def _load(self, rows: Iterable[LogRow]) -> dict[str, int]:
        by_table: dict[str, list[str]] = defaultdict(list)
        for name, row in rows:
            if name in self._tables:  # a table a later version dropped is simply not read
                by_table[name].append(row)
        for name, payloads in by_table.items():
            # Columns a row does not carry (added by a later migration) read as NULL.
            self.con.execute(_on(_LOAD, name), [json.dumps(self._tables[name]), payloads])
        return {name: len(by_table.get(name, ())) for name in self._tables}

    def _counts(self) -> dict[str, int]:
        counts = {}
        for name in self._tables:
            row = self.con.execute(_on(_COUNT, name)).fetchone()
            counts[name] = int(row[0]) if row else 0
        return counts

    def new_rows(self) -> list[LogRow]:
        """The rows appended since the load (or the last `mark_flushed`), oldest first: history is
        append-only, so they are the rows past the loaded count, in insertion (rowid) order."""
        rows: list[LogRow] = []
        for name, loaded in self._loaded.items():
            found = self.con.execute(_on(_APPENDED, name), [loaded]).fetchall()
            rows.extend((name, row[0]) for row in found)
        return rows

    def mark_flushed(self) -> None:
        """The rows returned by `new_rows` are now in the engine's log."""
        self._loaded = self._counts()

    def close(self) -> None:
        self.con.close()


# Statement templates over the table `__history`, which `_on` replaces by a history table.
_LOAD = "INSERT INTO __history SELECT unnest(from_json(j, CAST(? AS JSON))) FROM (SELECT unnest(CAST(? AS VARCHAR[])) AS j)"
_COUNT = "SELECT count(*) FROM __history"
# A row's struct holds its columns only (rowid is virtual): new rows come back as they were written.
_APPENDED = "SELECT to_json(t) FROM __history AS t WHERE t.rowid >= ? ORDER BY t.rowid"


@functools.lru_cache(maxsize=256)
def _on(template: str, name: str) -> str:
    """`template` over the history table `name`, as SQL (parsed once per process: a session's
    mirror runs each template over every history table)."""
    return render(_tree_on(template, name))


def _tree_on(template: str, name: str) -> exp.Expr:
    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Table) and node.name == "__history":
            target = table(name, HISTORY_SCHEMA)
            if node.args.get("alias") is not None:
                target.set("alias", node.args["alias"].copy())
            return target
        return node

    return sqlglot.parse_one(template, read=DIALECT).transform(swap)


_LOCAL_LOG = """
SELECT l.tbl, l.row, l.commit_id, c.state
FROM read_parquet(?) AS l
LEFT JOIN (SELECT commit_id, max(state) AS state FROM read_parquet(?) GROUP BY commit_id) AS c USING (commit_id)
ORDER BY l.commit_id, l.seq
"""


def read_log_files(
    log_files: list[str], commit_files: list[str], con: duckdb.DuckDBPyConnection | None = None
) -> list[tuple[str, str, str, str | None]]:
    """The rows of a history log kept as Parquet files on a local disk (a backend's own table of
    them, read here without that engine: DuckDB reads a few small files in milliseconds, where a
    Spark query costs a job): (table, row, commit id, commit state or None), in log order. Read
    through `con` when given (an in-memory DuckDB: a new one costs tens of milliseconds)."""
    if not log_files:
        return []
    owned = con is None
    con = connect_in_memory() if con is None else con
    try:
        if not commit_files:
            rows = con.execute(render(_ALL_UNMARKED), [log_files]).fetchall()
        else:
            rows = con.execute(
                render(sqlglot.parse_one(_LOCAL_LOG, read=DIALECT)), [log_files, commit_files]
            ).fetchall()
    finally:
        if owned:
            con.close()
    return [(str(table), str(row), str(commit), state) for table, row, commit, state in rows]


_ALL_UNMARKED = sqlglot.parse_one(
    "SELECT tbl, row, commit_id, CAST(NULL AS VARCHAR) FROM read_parquet(?) ORDER BY commit_id, seq",
    read=DIALECT,
)
