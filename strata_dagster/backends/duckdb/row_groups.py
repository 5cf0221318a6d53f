"""How much of the snapshot files a few ranges of one column read, from the files' Parquet
row-group statistics (their footers, never their rows): whether OR-ed ranges let DuckDB skip most
row groups, which they do when the rows are clustered by that column (time-ordered arrivals)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb.snapshot_files import file_of
from strata_dagster.backends.sql.runner import run
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, data_type
from strata_dagster.sql.segments import typed_literal


def snapshot_files(con: duckdb.DuckDBPyConnection, tables: Sequence[str]) -> list[str] | None:
    """The file each snapshot reads, or None when one of them is not a view over one file."""
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database() "
        "AND list_contains(?, view_name)",
        [SNAPSHOT_SCHEMA, list(tables)],
    ).fetchall()
    files = {str(name): file_of(str(sql)) for name, sql in rows}
    found = [files.get(table) for table in tables]
    if any(path is None for path in found):
        return None
    return [path for path in found if path is not None]


def share_read(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[str],
    column: str,
    type_name: str,
    runs: Sequence[tuple[date, date]],
) -> float | None:
    """The share of the files' rows in row groups whose `column` may hold a value in one of the
    half-open `runs` [first, after): a row group without statistics for it counts as read. None
    when the files have no row group of that column."""
    kind = data_type(type_name)

    def stat(name: str) -> exp.Expr:
        return exp.TryCast(this=exp.column(name), to=kind.copy())

    def bound(day: date) -> exp.Expr:
        return typed_literal(day.isoformat(), type_name)

    overlaps = [
        exp.and_(
            exp.GTE(this=stat("stats_max_value"), expression=bound(first)),
            exp.LT(this=stat("stats_min_value"), expression=bound(after)),
        )
        for first, after in runs
    ]
    unknown = exp.or_(
        exp.Is(this=stat("stats_min_value"), expression=exp.null()),
        exp.Is(this=stat("stats_max_value"), expression=exp.null()),
    )
    rows = exp.column("row_group_num_rows")
    read = exp.Filter(
        this=exp.func("sum", rows.copy()),
        expression=exp.Where(this=exp.or_(unknown, *overlaps)),
    )
    listing = exp.Array(expressions=[exp.Literal.string(path) for path in files])
    query = (
        exp.select(read, exp.func("sum", rows))
        .from_(exp.Table(this=exp.func("parquet_metadata", listing)))
        .where(exp.EQ(this=exp.column("path_in_schema"), expression=exp.Literal.string(column)))
    )
    row = run(con, query).fetchone()
    if row is None or not row[1]:
        return None
    return float(row[0] or 0) / float(row[1])
