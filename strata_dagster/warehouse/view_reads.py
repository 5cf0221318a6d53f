"""Which snapshot tables a view reads, from the SQL DuckDB stores for it.

DuckDB parses it (`json_serialize_sql`): a few milliseconds for a live view over a state of many
segments, where sqlglot took ten or more, and every run asks it of every live view it may reuse.
What the answer means is the same either way (tables.tables_of_view): the snapshot tables read,
or () when the view reads anything else (another schema, a CTE, a table function), as a view
someone edited would. SQL that DuckDB does not serialize (not `CREATE VIEW name AS <select>`)
goes to sqlglot.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from strata_dagster.warehouse.migrations import SNAPSHOT_SCHEMA

_NAME = r'(?:"(?:[^"]|"")*"|[^\s".(]+)'
# What DuckDB stores before the query: CREATE VIEW [schema.]name AS
_CREATE_VIEW = re.compile(
    rf"\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(?:{_NAME}\.)*{_NAME}\s+AS\s+", re.IGNORECASE
)
_SERIALIZE = "SELECT json_serialize_sql(?)"


def snapshot_tables_read(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[str, ...] | None:
    """The snapshot tables the stored view `sql` reads, () when it reads anything else; None when
    DuckDB cannot tell (the caller parses it another way)."""
    prefix = _CREATE_VIEW.match(sql)
    if prefix is None:
        return None
    body = sql[prefix.end() :].rstrip().removesuffix(";")
    row = con.execute(_SERIALIZE, [body]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True}
    if tree.get("error") or len(tree.get("statements", ())) != 1:
        return None
    tables: set[str] = set()
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
            return ()
        if kind == "BASE_TABLE":
            if node.get("catalog_name") or node.get("schema_name") != SNAPSHOT_SCHEMA:
                return ()
            tables.add(str(node.get("table_name")))
        pending.extend(value for value in node.values() if isinstance(value, (dict, list)))
    return tuple(sorted(tables))
