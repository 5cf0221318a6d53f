"""A warehouse moved or copied with its snapshot folder reads the files beside it.

A snapshot view names its file by absolute path (readers of the serving catalog get the same
paths). After `mv` of the project folder, those paths name nothing; after `cp -r`, the copy reads
the original's files, and its own `strata gc` would count every file of its own folder as
unreferenced. So a write session first points every snapshot view that reads a file of another
folder at the file of the same name in this warehouse's folder, when it is there: names are never
reused and files never change, so it holds the same rows. One transaction rewrites them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import sqlglot
from sqlglot import exp

from strata_dagster.warehouse.migrations import SNAPSHOT_SCHEMA
from strata_dagster.warehouse.snapshot_files import file_of
from strata_dagster.warehouse.sql import DIALECT, run, snapshot_table

if TYPE_CHECKING:
    from strata_dagster.warehouse.session import Session


def _elsewhere(con: duckdb.DuckDBPyConnection, folder: Path) -> list[tuple[str, str]]:
    """(view, SQL) of the snapshot views reading a file that is not in `folder`."""
    here = "read_parquet('" + (str(folder) + "/").replace("'", "''")
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database() "
        "AND contains(sql, 'read_parquet(') AND NOT contains(sql, ?)",
        [SNAPSHOT_SCHEMA, here],
    ).fetchall()
    return [(str(name), str(sql)) for name, sql in rows]


def _moved_view(name: str, sql: str, folder: Path) -> exp.Create | None:
    """The view reading the file of the same name in `folder`, or None when it is not there."""
    path = file_of(sql)
    if path is None or Path(path).parent == folder:
        return None
    here = folder / Path(path).name
    if not here.is_file():
        return None
    parsed = sqlglot.parse_one(sql, read=DIALECT)
    query = parsed.expression if isinstance(parsed, exp.Create) else None
    if not isinstance(query, exp.Query):
        return None
    literals = [node for node in query.find_all(exp.Literal) if node.is_string and node.this == path]
    if not literals:
        return None
    for literal in literals:
        literal.replace(exp.Literal.string(str(here)))
    return exp.Create(this=snapshot_table(name), kind="VIEW", expression=query, replace=True)


def relocate(session: Session, folder: Path) -> int:
    """Point the snapshot views that read files of another folder at this `folder`'s files of the
    same names; how many were rewritten (0, from one catalog query, when none moved)."""
    con = session.con
    moved = [view for name, sql in _elsewhere(con, folder) if (view := _moved_view(name, sql, folder))]
    if moved:
        with session.transaction():
            for view in moved:
                run(con, view, consume=True)
    return len(moved)
