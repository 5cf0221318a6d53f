"""Reading every file a warehouse refers to, for `strata doctor`: each read whole, never trusted.

What the engine checks before it uses a file (snapshot_files.problem_of, serving._is_whole) is
cheap; these checks read more (every history table, every snapshot file's footer, the serving
catalog itself) and name what they find, for engine.commands.doctor to say how to repair it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb import serving
from strata_dagster.backends.duckdb.compaction import STAGING_SUFFIX
from strata_dagster.backends.duckdb.connection import is_damage
from strata_dagster.backends.duckdb.snapshot_files import problem_of
from strata_dagster.backends.sql.runner import run
from strata_dagster.errors import first_line
from strata_dagster.state.migrations import HISTORY_SCHEMA


@dataclass(frozen=True)
class Problem:
    """Something found wrong with one file or object: what, and what is wrong with it."""

    subject: str
    problem: str


def history_problem(con: duckdb.DuckDBPyConnection) -> str | None:
    """Why the history tables cannot be read whole (every block of them read), or None."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ?",
        [HISTORY_SCHEMA],
    ).fetchall()
    for (name,) in rows:
        rows_of = exp.table_(str(name), db=HISTORY_SCHEMA).as_("t")
        try:
            run(con, exp.select(exp.func("sum", exp.func("hash", exp.column("t")))).from_(rows_of)).fetchall()
        except duckdb.Error as error:
            if not is_damage(error):
                raise
            return first_line(error)
    return None


def parquet_rows(con: duckdb.DuckDBPyConnection, path: Path) -> int | str:
    """The rows a Parquet file's footer counts, or why it cannot be read (magic bytes and footer)."""
    problem = problem_of(path)
    if problem is not None:
        return problem
    metadata = exp.func("parquet_file_metadata", exp.Literal.string(str(path)))
    try:
        row = run(con, exp.select("num_rows").from_(exp.Table(this=metadata))).fetchone()
    except duckdb.Error as error:
        return f"unreadable ({first_line(error)})"
    return int(row[0]) if row is not None else "unreadable (no footer)"


def serving_problems(warehouse: Path, latest_entry: int | None) -> list[Problem]:
    """What is wrong with the serving copy: no link, or one to nothing; a manifest or catalog that
    cannot be read; a catalog serving another entry than the latest; a file it reads that cannot
    be. `latest_entry` None: nothing was published (then no copy is expected)."""
    live = serving.live_path(warehouse)
    if not live.is_symlink():
        return [] if not latest_entry else [Problem(str(live), "missing: readers have no serving copy")]
    catalog = live.with_name(os.readlink(live))
    if not catalog.is_file():
        return [Problem(str(live), f"links to `{catalog.name}`, which is missing")]
    manifest = catalog.with_suffix(".json")
    listed = serving.listed_files(manifest)
    if listed is None:
        return [Problem(str(manifest), "cannot be read as a catalog's manifest")]
    con = duckdb.connect()
    try:
        try:
            con.execute(serving.reader_statement(warehouse))
            row = con.execute(f"SELECT entry FROM {serving.STATE_SCHEMA}.{serving.STATE_TABLE}").fetchone()
        except duckdb.Error as error:
            return [Problem(str(catalog), f"cannot be read ({first_line(error)})")]
    finally:
        con.close()
    found = []
    if latest_entry and (row is None or int(row[0]) != latest_entry):
        served = "nothing" if row is None else f"entry {row[0]}"
        found.append(Problem(str(catalog), f"serves {served}, not the latest entry {latest_entry}"))
    data = catalog.parent / "data"
    snapshots = warehouse.with_name(warehouse.name + ".snapshots")
    for folder, names in ((data, listed[0]), (snapshots, listed[1])):
        for name in names:
            problem = problem_of(folder / name)
            if problem is not None:
                found.append(Problem(str(folder / name), f"read by the serving catalog, is {problem}"))
    return found


def leftovers(warehouse: Path, referenced: set[str] | None) -> list[Problem]:
    """Files beside the warehouse that nothing reads: snapshot files no view or kept catalog reads
    (not looked for when `referenced` is None: unknown), temporary names of writes cut short, a
    compaction's copy, spill files of DuckDB."""
    found = []
    snapshots = warehouse.with_name(warehouse.name + ".snapshots")
    if snapshots.is_dir():
        for entry in sorted(os.scandir(snapshots), key=lambda entry: entry.name):
            if entry.name.startswith("."):
                found.append(Problem(entry.path, "the temporary file of a write cut short"))
            elif referenced is not None and entry.is_file() and entry.name not in referenced:
                found.append(Problem(entry.path, "a snapshot file nothing reads"))
    folder = serving.serving_dir(warehouse)
    for leftover in (*sorted(folder.glob(".*")), *sorted((folder / "data").glob(".*"))):
        found.append(Problem(str(leftover), "the temporary file of a serving write cut short"))
    staging = warehouse.with_name(warehouse.name + STAGING_SUFFIX)
    if staging.exists():
        found.append(Problem(str(staging), "the copy of a `strata gc --compact` cut short"))
    spill = warehouse.with_name(warehouse.name + ".tmp")
    if spill.is_dir() and any(spill.iterdir()):
        found.append(Problem(str(spill), "spill files DuckDB left (a run cut short while spilling)"))
    return found
