"""The history on Spark: an append-only log of history rows, and a commit marker written last.

Spark has no multi-statement transactions, so a write session publishes in steps: the rows it
added to the history go to `strata.history_log` under a new commit id, the live views are
repointed one by one (ALTER VIEW, one catalog call each), and only then is the commit marked in
`strata.history_commits`. Readers load only marked commits. A session that died between the first
step and the last leaves a log commit without its marker: `interrupted_commits` finds it, and the
next writer repoints the views back to what the marked history says, then marks the commit
abandoned, so it is reported once and never loaded.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from strata_dagster.backends.spark.catalog import ensure_schema
from strata_dagster.backends.spark.connection import SparkConnection, SparkError, spark_errors
from strata_dagster.state.history_mirror import HistoryMirror, LogRow, read_log_files
from strata_dagster.state.migrations import HISTORY_SCHEMA

LOG_TABLE = f"{HISTORY_SCHEMA}.history_log"
COMMITS_TABLE = f"{HISTORY_SCHEMA}.history_commits"
COMMITTED = "committed"
ABANDONED = "abandoned"


def ensure_log(con: SparkConnection) -> None:
    ensure_schema(con, HISTORY_SCHEMA)
    con.sql(
        f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (commit_id STRING, seq BIGINT, tbl STRING, row STRING) USING parquet"
    )
    con.sql(
        f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} "
        "(commit_id STRING, row_count BIGINT, state STRING, marked_at TIMESTAMP_NTZ) USING parquet"
    )


@dataclass(frozen=True)
class InterruptedCommit:
    commit_id: str
    row_count: int  # the rows it logged before it died


def _local_files(folder: Path, table: str) -> list[str] | None:
    """The Parquet files of one of the log's tables in a local warehouse directory, None when the
    table has no folder there (never written, or the catalog keeps it elsewhere)."""
    location = folder / f"{HISTORY_SCHEMA}.db" / table
    if not location.is_dir():
        return None
    return sorted(str(path) for path in location.glob("*.parquet"))


def tables_exist(con: SparkConnection, local_folder: Path | None, log_was_read: bool) -> bool:
    """Whether both tables of the log exist (ensure_log need not run): in a local warehouse both
    folders are there (Spark removes a table's folder with it); through Spark Connect, the log was
    read (its query reads both)."""
    if local_folder is None:
        return log_was_read
    return all(_local_files(local_folder, table) is not None for table in ("history_log", "history_commits"))


def read_log(
    con: SparkConnection, local_folder: Path | None = None, mirror: HistoryMirror | None = None
) -> tuple[list[LogRow], list[InterruptedCommit]] | None:
    """The rows of every committed commit, in the order they were written, and the commits with
    no marker at all (write sessions that died while publishing), in one query; None when the
    warehouse has no history log yet. A local log is read through `mirror`'s connection when given."""
    log_files = _local_files(local_folder, "history_log") if local_folder is not None else None
    if local_folder is not None and log_files is not None:
        # A local warehouse: the log's own files, read without a Spark job (the table is append-
        # only, and a file Spark has not committed is not in the folder, as for Spark itself).
        rows = read_log_files(
            log_files, _local_files(local_folder, "history_commits") or [], mirror.con if mirror else None
        )
        return _split(rows)
    try:
        rows = con.sql(
            f"SELECT l.tbl, l.row, l.commit_id, c.state FROM {LOG_TABLE} l LEFT JOIN "
            f"(SELECT commit_id, max(state) AS state FROM {COMMITS_TABLE} GROUP BY commit_id) c "
            "ON l.commit_id = c.commit_id ORDER BY l.commit_id, l.seq"
        ).fetchall()
    except SparkError as error:
        if error.is_missing_relation:
            return None
        raise
    return _split(rows)


def _split(rows: Iterable[tuple[Any, ...]]) -> tuple[list[LogRow], list[InterruptedCommit]]:
    committed: list[LogRow] = []
    unmarked: dict[str, int] = {}
    for table, row, commit_id, state in rows:
        if state == COMMITTED:
            committed.append((str(table), str(row)))
        elif state is None:
            unmarked[str(commit_id)] = unmarked.get(str(commit_id), 0) + 1
    return committed, [InterruptedCommit(commit_id, count) for commit_id, count in unmarked.items()]


def new_commit_id() -> str:
    """Sortable by time (the log is read in commit order), unique across processes."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"


def append_rows(con: SparkConnection, commit_id: str, rows: Sequence[LogRow]) -> None:
    """The first step of a publication: every new history row, under `commit_id`, in one write."""
    # Through Arrow: a local relation, with no Python worker to start on the executors.
    data = pa.table(
        {
            "commit_id": pa.array([commit_id] * len(rows), pa.string()),
            "seq": pa.array(range(len(rows)), pa.int64()),
            "tbl": pa.array([table for table, _ in rows], pa.string()),
            "row": pa.array([row for _, row in rows], pa.string()),
        }
    )
    with spark_errors():
        con.spark.createDataFrame(data).write.insertInto(LOG_TABLE)


def mark(con: SparkConnection, commit_id: str, row_count: int, state: str = COMMITTED) -> None:
    """The last step: the commit is history (or, for an interrupted one, abandoned)."""
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    data = pa.table(
        {
            "commit_id": pa.array([commit_id], pa.string()),
            "row_count": pa.array([row_count], pa.int64()),
            "state": pa.array([state], pa.string()),
            "marked_at": pa.array([now], pa.timestamp("us")),
        }
    )
    with spark_errors():
        con.spark.createDataFrame(data).write.insertInto(COMMITS_TABLE)
