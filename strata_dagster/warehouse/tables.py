"""Snapshot tables, live views and the pins checked on a new snapshot before it is published."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import sqlglot
from sqlglot import exp

from strata_dagster.compile.relations import view_name
from strata_dagster.warehouse import snapshot_files, view_reads
from strata_dagster.warehouse.migrations import SNAPSHOT_SCHEMA
from strata_dagster.warehouse.snapshot_files import SnapshotFiles
from strata_dagster.warehouse.sql import DIALECT, describe, run, snapshot_table, table


def snapshot_table_name(snapshot_id: str, model: str) -> str:
    return f"snap_{snapshot_id}_{model}"


_PENDING = table("__strata_pending_snapshot")  # a temporary view: the query, bound once


def create_snapshot(
    con: duckdb.DuckDBPyConnection, name: str, query: exp.Query, files: SnapshotFiles | None = None
) -> None:
    """Write a new immutable snapshot: a Parquet file and a view over it (snapshot_files.py), or a
    table when `files` has no folder or the file would not give the columns back exactly. A
    leftover of that name is never published (names come from build keys registered only at
    publication), so it may be replaced. `query` is consumed (see sql.render): pass a tree built
    for this call."""
    kind = _kind(con, name, files)
    if files is None or files.folder is None:
        if kind is not None:
            # Dropped rather than replaced: an engine without CREATE OR REPLACE TABLE AS (Spark).
            drop_table(con, name, files)
        statement = exp.Create(this=snapshot_table(name), kind="TABLE", expression=query)
        run(con, statement, consume=True)
        _set_kind(files, name, "table")
        return
    temporary = exp.Properties(expressions=[exp.TemporaryProperty()])
    pending = exp.Create(this=_PENDING, kind="VIEW", expression=query, properties=temporary, replace=True)
    run(con, pending, consume=True)
    try:
        if kind is not None:
            drop_table(con, name, files)
        columns = list(describe(con, _PENDING))
        if snapshot_files.is_storable(columns) and _write_file(con, name, columns, files):
            _set_kind(files, name, "view")
        else:
            rows = exp.select("*").from_(_PENDING)
            run(con, exp.Create(this=snapshot_table(name), kind="TABLE", expression=rows))
            _set_kind(files, name, "table")
    except BaseException:
        # The failed statement may have aborted the transaction (the view goes with it).
        with contextlib.suppress(duckdb.Error):
            run(con, exp.Drop(tables=[_PENDING], kind="VIEW", exists=True))
        raise
    run(con, exp.Drop(tables=[_PENDING], kind="VIEW", exists=True))


def _write_file(
    con: duckdb.DuckDBPyConnection, name: str, columns: list[tuple[str, str]], files: SnapshotFiles
) -> bool:
    """The pending rows as a file and the snapshot as a view over it; False (nothing left but an
    unreferenced file) when the view would not give back exactly the columns' types."""
    assert files.folder is not None
    files.folder.mkdir(exist_ok=True)
    path = snapshot_files.new_file(files.folder, name)
    files.written.append(path)
    snapshot_files.copy_to_file(con, path, snapshot_files.write_query(_PENDING, columns), sync=False)
    files.unsynced.append(path)
    view = exp.Create(
        this=snapshot_table(name), kind="VIEW", expression=snapshot_files.read_query(path, columns)
    )
    run(con, view, consume=True)
    if snapshot_files.is_known_exact(columns) or list(describe(con, snapshot_table(name))) == columns:
        return True
    run(con, exp.Drop(tables=[snapshot_table(name)], kind="VIEW", exists=True))
    return False


def _kind(con: duckdb.DuckDBPyConnection, name: str, files: SnapshotFiles | None) -> str | None:
    """'table' or 'view' for a snapshot of that name, None when there is none."""
    if files is not None:
        return files.kind_of(con, name)
    if _is_view(con, name):
        return "view"
    return "table" if table_exists(con, name) else None


def _set_kind(files: SnapshotFiles | None, name: str, kind: str | None) -> None:
    if files is not None:
        files.set_kind(name, kind)


def rename_snapshot(
    con: duckdb.DuckDBPyConnection, name: str, new_name: str, files: SnapshotFiles | None = None
) -> None:
    """Give a snapshot a build is still writing (never a published one) another name (a snapshot
    file keeps its own name: only the view over it is renamed)."""
    rename = exp.AlterRename(this=exp.to_table(new_name))
    kind = _kind(con, name, files) or "table"
    run(con, exp.Alter(this=snapshot_table(name), kind=kind.upper(), actions=[rename]))
    _set_kind(files, name, None)
    _set_kind(files, new_name, kind)


def create_view_snapshot(
    con: duckdb.DuckDBPyConnection, name: str, query: exp.Query, files: SnapshotFiles | None = None
) -> None:
    """A `materialize: view` model's snapshot: an immutable view over its inputs, named like a
    snapshot table so live views, rollback, branches and gc treat it alike. `query` is consumed."""
    if _kind(con, name, files) == "table":
        drop_table(con, name, files)
    statement = exp.Create(this=snapshot_table(name), kind="VIEW", expression=query, replace=True)
    run(con, statement, consume=True)
    _set_kind(files, name, "view")


def drop_table(con: duckdb.DuckDBPyConnection, name: str, files: SnapshotFiles | None = None) -> None:
    """Drop a snapshot, a table or a view (over its file, or a view model's): DuckDB refuses DROP
    TABLE on a view. A snapshot's file stays until nothing reads it (snapshot_files.py)."""
    kind = _kind(con, name, files)
    if kind is None:
        return
    run(con, exp.Drop(tables=[snapshot_table(name)], kind=kind.upper(), exists=True))
    _set_kind(files, name, None)


def _is_view(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE schema_name = ? AND view_name = ? AND database_name = current_database()",
        [SNAPSHOT_SCHEMA, name],
    ).fetchone()
    return bool(row and row[0])


def view_table(branch_schema: str, model: str) -> exp.Table:
    return table(view_name(model), branch_schema)


def ensure_schema(con: duckdb.DuckDBPyConnection, schema: str) -> None:
    run(con, exp.Create(this=exp.Table(this=exp.to_identifier(schema)), kind="SCHEMA", exists=True))


def point_view_at(con: duckdb.DuckDBPyConnection, branch_schema: str, model: str, query: exp.Query) -> None:
    """Repoint a model's live view; `query` is consumed (see sql.render)."""
    ensure_schema(con, branch_schema)
    statement = exp.Create(this=view_table(branch_schema, model), kind="VIEW", expression=query, replace=True)
    run(con, statement, consume=True)


def drop_view(con: duckdb.DuckDBPyConnection, branch_schema: str, model: str) -> None:
    """Remove a model's live view (a retired model's), if it exists."""
    run(con, exp.Drop(tables=[view_table(branch_schema, model)], kind="VIEW", exists=True))


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


def tables_of_view(sql: str, dialect: str = DIALECT) -> tuple[str, ...]:
    """The snapshot tables a view's stored SQL (in `dialect`) reads; () when it reads anything else."""
    try:
        parsed = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return ()
    query = parsed.expression if isinstance(parsed, exp.Create) else parsed
    if query is None:
        return ()
    tables = [node for node in query.find_all(exp.Table) if node.db == SNAPSHOT_SCHEMA]
    other = [node for node in query.find_all(exp.Table) if node.db != SNAPSHOT_SCHEMA]
    if other:
        return ()  # the view was edited to read something else
    return tuple(sorted({node.name for node in tables}))


def snapshot_table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Every snapshot: tables, and the views of `materialize: view` models."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE schema_name = ? AND database_name = current_database()",
        [SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA],
    ).fetchall()
    return {row[0] for row in rows}


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ? AND database_name = current_database()",
        [SNAPSHOT_SCHEMA, name],
    ).fetchone()
    return bool(row and row[0]) or _is_view(con, name)


@dataclass(frozen=True)
class PinViolation:
    kind: str  # "unique" | "contract"
    message: str


def unique_violation(
    con: duckdb.DuckDBPyConnection, relation: str | exp.Query, columns: Sequence[str]
) -> PinViolation | None:
    """Duplicate values of `columns` in a snapshot table (by name) or in a query's rows."""
    keys = [exp.column(column) for column in columns]
    source = snapshot_table(relation) if isinstance(relation, str) else relation.subquery("__pinned")
    duplicates = (
        exp.select(*keys, exp.func("count_star").as_("__copies"))
        .from_(source)
        .group_by(*keys)
        .having(exp.GT(this=exp.func("count_star"), expression=exp.Literal.number(1)))
    )
    query = exp.select(exp.func("count_star"), exp.func("first", exp.column("__copies"))).from_(
        duplicates.subquery("__dups")
    )
    example = exp.select(*keys).from_(duplicates.subquery("__dups")).limit(1)
    row = run(con, query).fetchone()
    if not row or not row[0]:
        return None
    sample = run(con, example).fetchone()
    shown = ", ".join(f"{column}={value!r}" for column, value in zip(columns, sample or (), strict=False))
    return PinViolation(
        "unique",
        f"{row[0]} duplicate key value(s) of ({', '.join(columns)}), e.g. {shown}",
    )


def canonical_type(con: duckdb.DuckDBPyConnection, type_text: str) -> str:
    """DuckDB's own spelling of a type (INT -> INTEGER); the text goes through sqlglot, never spliced."""
    engines_own = getattr(con, "canonical_type", None)
    if engines_own is not None:  # another engine spells the type its way, then as DuckDB would
        return str(engines_own(type_text))
    data_type = exp.DataType.build(type_text, dialect=DIALECT)
    row = run(con, exp.select(exp.func("typeof", exp.cast(exp.null(), data_type)))).fetchone()
    return str(row[0]) if row else type_text


def contract_violation(
    con: duckdb.DuckDBPyConnection, name: str, contract: Sequence[tuple[str, str, bool]]
) -> PinViolation | None:
    """`contract` lists (column, type, is_not_null)."""
    actual = dict(describe(con, snapshot_table(name)))
    problems = []
    for column, type_text, is_not_null in contract:
        if column not in actual:
            problems.append(f"column `{column}` is missing")
            continue
        try:
            expected = canonical_type(con, type_text)
        except (sqlglot.errors.ParseError, duckdb.Error, ValueError):
            problems.append(f"`{column}`: `{type_text}` is not a DuckDB type")
            continue
        if actual[column] != expected:
            problems.append(f"`{column}` is {actual[column]}, the contract says {expected}")
        if is_not_null:
            nulls = run(
                con,
                exp.select(exp.func("count_star"))
                .from_(snapshot_table(name))
                .where(exp.Is(this=exp.column(column), expression=exp.null())),
            ).fetchone()
            if nulls and nulls[0]:
                problems.append(f"`{column}` has {nulls[0]} NULL value(s) but is `not null`")
    if not problems:
        return None
    return PinViolation("contract", "; ".join(problems))
