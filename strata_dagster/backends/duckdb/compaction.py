"""Give a warehouse file's free space back to the disk: copy it into a new file, verify, swap.

DuckDB reuses the blocks of dropped tables but never shrinks its file. Compaction copies every
schema, table and view into a staging file beside the warehouse while holding the warehouse's
lock, checks the copy table by table (rows and an order-independent row hash) and view by view,
and renames it over the warehouse while a connection to it still holds its lock. A crash at any
step leaves the old complete file (and a stale staging file the next compaction removes) or the
new complete one, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb.connection import connect
from strata_dagster.backends.duckdb.limits import exceeded_error, resource_limits
from strata_dagster.backends.sql.runner import run
from strata_dagster.errors import E_GC, StrataError, first_line
from strata_dagster.paths import fsync
from strata_dagster.sql.render import render, table

STAGING_SUFFIX = ".compact"
_STAGING_CATALOG = "strata_compacted"


@dataclass(frozen=True)
class Compaction:
    bytes_before: int
    bytes_after: int

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_before - self.bytes_after


def file_bytes(path: Path) -> int:
    """The warehouse's size on disk, its write-ahead log included."""
    return sum(part.stat().st_size for part in (path, _wal(path)) if part.exists())


def free_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """Bytes of the open warehouse's file that DuckDB holds free for reuse."""
    row = con.execute(
        "SELECT block_size * free_blocks FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def compact(path: Path, on_step: Callable[[str], None] = lambda step: None) -> Compaction:
    """Rewrite `path` into a file without free blocks; `on_step` is told after each durable step."""
    staging = path.with_name(path.name + STAGING_SUFFIX)
    compacted: duckdb.DuckDBPyConnection | None = None
    try:
        with connect(path) as con:
            con.execute("CHECKPOINT")
            before = file_bytes(path)
            _remove(staging)
            _copy(con, staging)
            on_step("compact_copied")
            # A connection of its own holds the new file's lock from here until after the swap.
            compacted = duckdb.connect(str(staging), config=resource_limits(path).duckdb_config())
            problem = _first_difference(con, compacted)
            if problem is None:
                compacted.execute("CHECKPOINT")
                fsync(staging)
                on_step("compact_verified")
                con.execute("CHECKPOINT")
                problem = _unflushed_log(path)
            if problem is not None:
                raise _Abandoned(problem)
            os.replace(staging, path)
            fsync(path.parent)
            on_step("compact_replaced")
    except (_Abandoned, duckdb.Error) as error:
        if compacted is not None:
            compacted.close()
            compacted = None
        _remove(staging)
        if isinstance(error, duckdb.OutOfMemoryException):
            raise exceeded_error(error) from None
        reason = first_line(error)
        raise StrataError(
            E_GC,
            f"cannot compact `{path}`: {reason}; the warehouse is unchanged",
            hint="free disk space for a copy of the warehouse, or run `strata gc --compact` again",
        ) from None
    finally:
        if compacted is not None:
            compacted.close()
    return Compaction(before, file_bytes(path))


class _Abandoned(Exception):
    """The copy is not fit to replace the warehouse."""


def _copy(con: duckdb.DuckDBPyConnection, staging: Path) -> None:
    source = con.execute("SELECT current_database()").fetchone()
    assert source is not None
    target = exp.to_identifier(_STAGING_CATALOG)
    run(con, exp.Attach(this=exp.alias_(exp.Literal.string(str(staging)), target)))
    try:
        # sqlglot has no node for COPY FROM DATABASE; both names are quoted by sqlglot.
        names = f"FROM DATABASE {render(exp.to_identifier(source[0]))} TO {render(target)}"
        run(con, exp.Command(this="COPY", expression=names))
    finally:
        run(con, exp.Detach(this=target))


def _first_difference(old: duckdb.DuckDBPyConnection, new: duckdb.DuckDBPyConnection) -> str | None:
    listing = (
        "SELECT schema_name, table_name FROM duckdb_tables() "
        "WHERE database_name = current_database() ORDER BY ALL"
    )
    tables = old.execute(listing).fetchall()
    if new.execute(listing).fetchall() != tables:
        return "the copy's tables differ"
    views = (
        "SELECT schema_name, view_name, sql FROM duckdb_views() "
        "WHERE database_name = current_database() AND NOT internal ORDER BY ALL"
    )
    if new.execute(views).fetchall() != old.execute(views).fetchall():
        return "the copy's views differ"
    for schema, name in tables:
        query = exp.select(
            exp.func("count", exp.Star()),
            exp.func("sum", exp.cast(exp.func("hash", exp.column("__row")), "HUGEINT")),
        ).from_(table(name, schema).as_("__row"))
        if run(new, query).fetchall() != run(old, query).fetchall():
            return f"the copy's table {schema}.{name} differs"
    return None


def _unflushed_log(path: Path) -> str | None:
    # Once the copy is renamed over the old file, a log left at the old file's name would be
    # replayed into the copy.
    wal = _wal(path)
    if wal.exists() and wal.stat().st_size > 0:
        return "its write-ahead log is not empty after CHECKPOINT"
    return None


def _wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _remove(staging: Path) -> None:
    for leftover in (staging, _wal(staging)):
        leftover.unlink(missing_ok=True)
