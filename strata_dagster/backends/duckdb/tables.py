"""Snapshot and view names, what a view reads, and DuckDB's catalog of them (the SQL that writes
snapshots and views, and checks pins, is shared by both backends: backends/sql/tables.py)."""

from __future__ import annotations

import duckdb

from strata_dagster.backends.duckdb import view_reads
from strata_dagster.compile.relations import view_name
from strata_dagster.sql.render import SNAPSHOT_SCHEMA
from strata_dagster.sql.views import tables_of_view


def view_snapshot_tables(
    con: duckdb.DuckDBPyConnection, branch_schema: str, model: str
) -> tuple[str, ...] | None:
    """The snapshot tables a live view reads, as DuckDB stores it now; None when there is no view."""
    row = con.execute(
        "SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = ? AND database_name = current_database()",
        [branch_schema, view_name(model)],
    ).fetchone()
    return None if row is None else snapshot_tables_of_view(con, row[0])


def snapshot_tables_of_view(con: duckdb.DuckDBPyConnection | None, sql: str) -> tuple[str, ...]:
    """`tables_of_view`, from DuckDB's own parse of the SQL when `con` is DuckDB's and DuckDB can
    tell (view_reads: a few ms where sqlglot takes ten or more), else from sqlglot's."""
    read = None if con is None else view_reads.snapshot_tables_read(con, sql)
    return tables_of_view(sql) if read is None else read


def view_sqls(con: duckdb.DuckDBPyConnection, branch_schema: str) -> dict[str, str]:
    """Every view of a schema: view name -> its stored SQL (one catalog query)."""
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database()",
        [branch_schema],
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def snapshot_table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Every snapshot: tables, and the views of `materialize: view` models."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database()",
        [SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA],
    ).fetchall()
    return {row[0] for row in rows}
