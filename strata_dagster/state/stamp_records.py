"""Pruning `strata.source_stamps`, the record of source scans under their files' stamps.

The history is append-only (state/history.py); these rows are a cache of scans beside it. Only the
newest record of each source, relation and engine is ever read (`HistoryReader.source_stamp_figures`),
and an older stamp never comes back: the status-change times in it only move forward. For a
history in a database file; an engine whose history is an append-only log records none.
"""

from __future__ import annotations

import duckdb

from strata_dagster.state.migrations import has_history_table


def prune(con: duckdb.DuckDBPyConnection) -> int:
    """Delete every record but the newest of each source, relation and engine; how many went."""
    if not has_history_table(con, "source_stamps"):
        return 0
    row = con.execute(
        "DELETE FROM strata.source_stamps WHERE rowid NOT IN "
        "(SELECT max(rowid) FROM strata.source_stamps GROUP BY source, relation, engine)"
    ).fetchone()
    return int(row[0]) if row else 0
