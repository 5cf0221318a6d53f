"""Readers of the serving copy for the tests: a whole-state fingerprint, and a polling process.

Run as a module, it polls: `python -m strata_dagster_tests.support.serving_support WAREHOUSE OUT STOP [PAUSE]`
writes one JSON line per poll to OUT (the state it saw, or the error) every PAUSE seconds (50 ms
by default; 0 polls in a loop) until STOP exists.
"""

import json
import sys
import time
from pathlib import Path

import duckdb

from strata_dagster.backends.duckdb.serving import READER_CATALOG, STATE_SCHEMA, reader_statement
from strata_dagster.backends.duckdb.snapshot_files import file_of, folder_of
from strata_dagster.state.detail_files import FOLDER as DETAIL_FOLDER
from strata_dagster.state.history import HistoryReader

POLL_SECONDS = 0.05


def _views(con, database: str, schemas=None) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal "
        "AND schema_name NOT IN ('strata', 'strata_snapshots', ?) AND starts_with(view_name, 'v_') ORDER BY 1, 2",
        [database, STATE_SCHEMA],
    ).fetchall()
    return [row for row in rows if schemas is None or row[0] in schemas]


def _fingerprint(con, views) -> list[list]:
    """Per view: its row count and the sum of its row hashes (a multiset identity)."""
    state = []
    for schema, view in views:
        count, total = con.execute(f'SELECT count(*), sum(hash(r)) FROM "{schema}"."{view}" AS r').fetchone()
        state.append([f"{schema}.{view}", count, str(total)])
    return state


def served_state(warehouse: Path) -> list[list]:
    """Every live view as a fresh reader sees it through the serving copy."""
    con = duckdb.connect()
    try:
        con.execute(reader_statement(warehouse))
        return _fingerprint(con, _views(con, READER_CATALOG))
    finally:
        con.close()


def warehouse_state(warehouse: Path) -> list[list]:
    """Every live view of every branch as the writer's file holds it."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        branches = {
            row[0] for row in con.execute("SELECT DISTINCT branch FROM strata.publications").fetchall()
        }
        return _fingerprint(
            con, _views(con, con.execute("SELECT current_database()").fetchone()[0], branches)
        )
    finally:
        con.close()


def unread_snapshot_files(warehouse: Path) -> set[str]:
    """Files in the warehouse's snapshot folder that no snapshot view reads, and detail files no
    history record names, as `history/<name>` (garbage)."""
    folder = folder_of(warehouse)
    if not folder.exists():
        return set()
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        sqls = con.execute("SELECT sql FROM duckdb_views() WHERE schema_name = 'strata_snapshots'").fetchall()
        named = HistoryReader(con).detail_file_names()
    finally:
        con.close()
    read = {Path(path).name for (sql,) in sqls if (path := file_of(sql)) is not None}
    details = folder / DETAIL_FOLDER
    unnamed = {f"{DETAIL_FOLDER}/{path.name}" for path in details.glob("*") if path.name not in named}
    return {path.name for path in folder.iterdir() if path.is_file()} - read | unnamed


def assert_served_as_published(warehouse: Path) -> None:
    """A fresh reader of the serving copy sees every live view exactly as the warehouse holds it."""
    assert served_state(warehouse) == warehouse_state(warehouse)


def poll(warehouse: Path, out: Path, stop: Path, pause: float = POLL_SECONDS) -> None:
    with out.open("w") as sink:
        while not stop.exists():
            try:
                record = {"state": served_state(warehouse)}
            except Exception as error:  # noqa: BLE001 - every failure of a reader is what we count
                record = {"error": str(error).splitlines()[0]}
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            time.sleep(pause)


if __name__ == "__main__":
    poll(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), *map(float, sys.argv[4:5]))
