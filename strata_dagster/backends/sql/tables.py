"""Snapshots, live views and the pins checked on a new snapshot before it is published, in the
SQL both backends run (a backend that writes snapshots as files of its own does so through its
`SnapshotKinds.write_snapshot`)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import sqlglot
from sqlglot import exp

from strata_dagster.backends.sql.runner import Connection, describe, run
from strata_dagster.backends.sql.snapshot_kinds import SnapshotKinds
from strata_dagster.sql.render import DIALECT, snapshot_table
from strata_dagster.sql.views import PinViolation, view_table


def create_snapshot(con: Connection, name: str, query: exp.Query, files: SnapshotKinds) -> None:
    """Write a new immutable snapshot: a table when `files` has no folder, else a file of
    strata's own and a view over it (`files.write_snapshot`, DuckDB's snapshot_files.py). A
    leftover of that name is never published (names come from build keys registered only at
    publication), so it may be replaced. `query` is consumed (see sql.render): pass a tree built
    for this call."""
    kind = _kind(con, name, files)
    if files.folder is not None:
        files.write_snapshot(con, name, query, kind)
        return
    if kind is not None:
        # Dropped rather than replaced: a backend without CREATE OR REPLACE TABLE AS (Spark).
        drop_table(con, name, files)
    statement = exp.Create(this=snapshot_table(name), kind="TABLE", expression=query)
    run(con, statement, consume=True)
    files.set_kind(name, "table")


def _kind(con: Connection, name: str, files: SnapshotKinds) -> str | None:
    """'table' or 'view' for a snapshot of that name, None when there is none."""
    return files.kind_of(con, name)


def rename_snapshot(con: Connection, name: str, new_name: str, files: SnapshotKinds) -> None:
    """Give a snapshot a build is still writing (never a published one) another name (a snapshot
    file keeps its own name: only the view over it is renamed)."""
    rename = exp.AlterRename(this=exp.to_table(new_name))
    kind = _kind(con, name, files) or "table"
    run(con, exp.Alter(this=snapshot_table(name), kind=kind.upper(), actions=[rename]))
    files.set_kind(name, None)
    files.set_kind(new_name, kind)


def create_view_snapshot(con: Connection, name: str, query: exp.Query, files: SnapshotKinds) -> None:
    """A `materialize: view` model's snapshot: an immutable view over its inputs, named like a
    snapshot table so live views, rollback, branches and gc treat it alike. `query` is consumed."""
    if _kind(con, name, files) == "table":
        drop_table(con, name, files)
    statement = exp.Create(this=snapshot_table(name), kind="VIEW", expression=query, replace=True)
    run(con, statement, consume=True)
    files.set_kind(name, "view")


def drop_table(con: Connection, name: str, files: SnapshotKinds) -> None:
    """Drop a snapshot, a table or a view (over its file, or a view model's): DuckDB refuses DROP
    TABLE on a view. A snapshot's file stays until nothing reads it (snapshot_files.py)."""
    kind = _kind(con, name, files)
    if kind is None:
        return
    run(con, exp.Drop(tables=[snapshot_table(name)], kind=kind.upper(), exists=True))
    files.set_kind(name, None)


def ensure_schema(con: Connection, schema: str) -> None:
    run(con, exp.Create(this=exp.Table(this=exp.to_identifier(schema)), kind="SCHEMA", exists=True))


def point_view_at(con: Connection, branch_schema: str, model: str, query: exp.Query) -> None:
    """Repoint a model's live view; `query` is consumed (see sql.render)."""
    ensure_schema(con, branch_schema)
    statement = exp.Create(this=view_table(branch_schema, model), kind="VIEW", expression=query, replace=True)
    run(con, statement, consume=True)


def drop_view(con: Connection, branch_schema: str, model: str) -> None:
    """Remove a model's live view (a retired model's), if it exists."""
    run(con, exp.Drop(tables=[view_table(branch_schema, model)], kind="VIEW", exists=True))


def unique_violation(
    con: Connection, relation: str | exp.Query, columns: Sequence[str]
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


def canonical_type(con: Connection, type_text: str) -> str:
    """DuckDB's own spelling of a type (INT -> INTEGER); the text goes through sqlglot, never spliced."""
    if not isinstance(con, duckdb.DuckDBPyConnection):  # another backend spells it, then as DuckDB would
        return con.canonical_type(type_text)
    row = run(con, exp.select(_type_of(type_text))).fetchone()
    return str(row[0]) if row else type_text


def canonical_types(con: Connection, type_texts: Sequence[str]) -> dict[str, str | None]:
    """`canonical_type` of each text, None for one that is not a type. On DuckDB one statement
    spells them all (a contract names a type per column); each is asked alone only when that
    statement fails, to tell which text is not a type."""
    texts = sorted(set(type_texts))
    if isinstance(con, duckdb.DuckDBPyConnection) and texts:
        try:
            row = run(con, exp.select(*(_type_of(text) for text in texts))).fetchone()
            return {text: str(spelled) for text, spelled in zip(texts, row or (), strict=True)}
        except (sqlglot.errors.ParseError, duckdb.Error, ValueError):
            pass  # one of them is not a type: asked one by one below
    spelled: dict[str, str | None] = {}
    for text in texts:
        try:
            spelled[text] = canonical_type(con, text)
        except (sqlglot.errors.ParseError, duckdb.Error, ValueError):
            spelled[text] = None
    return spelled


def _type_of(type_text: str) -> exp.Expr:
    return exp.func("typeof", exp.cast(exp.null(), exp.DataType.build(type_text, dialect=DIALECT)))


def null_counts(con: Connection, relation: exp.Table, columns: Sequence[str]) -> list[int]:
    """How many NULLs each of `columns` holds in `relation`, counted in one scan."""
    counts = exp.select(
        *(
            exp.func(
                "count",
                exp.Case(ifs=[exp.If(this=exp.column(column).is_(exp.null()), true=exp.Literal.number(1))]),
            )
            for column in columns
        )
    ).from_(relation.copy())
    row = run(con, counts).fetchone() or ()
    return [int(nulls) for nulls in row]


def contract_violation(
    con: Connection, name: str, contract: Sequence[tuple[str, str, bool]]
) -> PinViolation | None:
    """`contract` lists (column, type, is_not_null)."""
    actual = dict(describe(con, snapshot_table(name)))
    present = [
        (column, type_text, is_not_null) for column, type_text, is_not_null in contract if column in actual
    ]
    spelled = canonical_types(con, [type_text for _, type_text, _ in present])
    checked = [column for column, type_text, is_not_null in present if is_not_null and spelled[type_text]]
    nulls = (
        dict(zip(checked, null_counts(con, snapshot_table(name), checked), strict=True)) if checked else {}
    )
    problems = []
    for column, type_text, _ in contract:
        if column not in actual:
            problems.append(f"column `{column}` is missing")
            continue
        expected = spelled[type_text]
        if expected is None:
            problems.append(f"`{column}`: `{type_text}` is not a DuckDB type")
            continue
        if actual[column] != expected:
            problems.append(f"`{column}` is {actual[column]}, the contract says {expected}")
        if nulls.get(column):
            problems.append(f"`{column}` has {nulls[column]} NULL value(s) but is `not null`")
    if not problems:
        return None
    return PinViolation("contract", "; ".join(problems))
