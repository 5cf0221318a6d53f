"""Which relations a view reads, from the SQL DuckDB stores for it.

DuckDB parses it (`json_serialize_sql`): a few milliseconds for a live view over a state of many
segments, where sqlglot took ten or more, and every run asks it of every live view it may reuse
(sql/views.py tables_of_view), as every serving refresh does of every changed one (serving_catalog).
A view reads something reusable only when every table it names is a `strata_snapshots` relation
and it calls no table function; anything else (another schema, a catalog, a CTE, `read_parquet`)
is what a view someone edited reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import duckdb

from strata_dagster.sql.render import SNAPSHOT_SCHEMA

_NAME = r'(?:"(?:[^"]|"")*"|[^\s".(]+)'
# What DuckDB stores before the query: CREATE VIEW [schema.]name AS
_CREATE_VIEW = re.compile(
    rf"\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(?:{_NAME}\.)*{_NAME}\s+AS\s+", re.IGNORECASE
)
_SERIALIZE = "SELECT json_serialize_sql(?)"


@dataclass(frozen=True)
class Relations:
    """What one query reads, as DuckDB parses it."""

    tables: frozenset[tuple[str, str, str]]  # (catalog, schema, name) of every table it names
    calls_table_function: bool
    ctes: frozenset[str] = frozenset()  # the names of the common table expressions it defines

    def snapshots(self) -> frozenset[str] | None:
        """The snapshot relations read, None when it reads anything else."""
        if self.calls_table_function or any(
            catalog or schema != SNAPSHOT_SCHEMA for catalog, schema, _ in self.tables
        ):
            return None
        return frozenset(name for _, _, name in self.tables)


def relations_read(con: duckdb.DuckDBPyConnection, query: str) -> Relations | None:
    """What `query` reads; None when DuckDB does not serialize it as one statement."""
    row = con.execute(_SERIALIZE, [query]).fetchone()
    tree: dict[str, Any] = json.loads(row[0]) if row else {"error": True}
    if tree.get("error") or len(tree.get("statements", ())) != 1:
        return None
    tables: set[tuple[str, str, str]] = set()
    ctes: set[str] = set()
    calls_table_function = False
    pending: list[Any] = [tree["statements"]]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            calls_table_function = True
        elif kind == "BASE_TABLE":
            tables.add(
                (
                    str(node.get("catalog_name") or ""),
                    str(node.get("schema_name") or ""),
                    str(node.get("table_name")),
                )
            )
        defined = node.get("cte_map")
        if isinstance(defined, dict):
            ctes.update(str(item.get("key")) for item in defined.get("map", ()) if isinstance(item, dict))
        pending.extend(value for value in node.values() if isinstance(value, (dict, list)))
    return Relations(frozenset(tables), calls_table_function, frozenset(ctes))


def snapshot_tables_read(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[str, ...] | None:
    """The snapshot tables the stored view `sql` reads, () when it reads anything else; None when
    DuckDB cannot tell (the caller parses it another way). What a view reads is a function of its
    text, so the answers are kept (a few hundred): a process that runs again and again over the
    same live views (a sensor, a daemon) asks DuckDB's parser once per version of a view."""
    kept = _read_by_view.get(sql)
    if kept is not None:
        return kept
    prefix = _CREATE_VIEW.match(sql)
    if prefix is None:
        return None
    read = relations_read(con, sql[prefix.end() :].rstrip().removesuffix(";"))
    if read is None:
        return None
    snapshots = read.snapshots()
    tables = () if snapshots is None else tuple(sorted(snapshots))
    if len(_read_by_view) >= _KEPT_VIEWS:
        _read_by_view.clear()  # a process that saw this many view versions starts over
    _read_by_view[sql] = tables
    return tables


# The answers of snapshot_tables_read (stored SQL -> snapshot tables), shared by the threads of a
# process: a dict's get, set and clear are each atomic, and a race parses a view twice at most.
_KEPT_VIEWS = 256
_read_by_view: dict[str, tuple[str, ...]] = {}
