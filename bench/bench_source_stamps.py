"""Source stamps: a no-change run over sources in a DuckDB database file, or in Parquet files
(`--files`), against the scan it skips.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_source_stamps.py [--rows 10000000] [--repeat 5] [--files]

The engine's three-model project of bench_engine.py, its sources declared `database:` in a file of
their own (N orders, N/50 customers, `versioning: full`). After a first build and a wait for the
file to settle, a no-change `run_project(only_stale=True)` takes the sources' figures from the
record of the file's stamp (docs/language.md, "How a run sees a source change"). It is timed
against what deciding by content costs without the record: the whole-row fingerprint scans of
both tables, in a connection that attaches the file. Both in this process, interleaved. With
`--files` the tables are written to Parquet (orders in 10 folders, one per last digit of the
id, customers in one file) and read through `path:` patterns; the record is then taken under the
stamp of every file and folder the patterns reach.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
from bench_engine import PROJECT, _assert_noop, console, interleave
from bench_shop import load

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.file_stamps import SETTLE_NS, database_stamp, files_stamp
from strata_dagster.engine.run import run_project

SCANS = (
    "SELECT count(*), sum(hash(t)::HUGEINT) FROM ingest.raw.orders AS t",
    "SELECT count(*), sum(hash(t)::HUGEINT) FROM ingest.raw.customers AS t",
)


PATTERNS = {"orders": "files/orders/*/*.parquet", "customers": "files/customers/*.parquet"}


def scan(ingest: Path) -> None:
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{ingest}' AS ingest (READ_ONLY)")
        for statement in SCANS:
            con.execute(statement).fetchall()
    finally:
        con.close()


def scan_files(root: Path) -> None:
    con = duckdb.connect()
    try:
        for statement in SCANS:
            for table, pattern in PATTERNS.items():
                statement = statement.replace(f"ingest.raw.{table}", f"read_parquet('{root / pattern}')")
            con.execute(statement).fetchall()
    finally:
        con.close()


def write_files(ingest: Path, root: Path) -> None:
    """The ingest file's tables as Parquet under `root`, where PATTERNS reads them."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{ingest}' AS ingest (READ_ONLY)")
        (root / "files" / "customers").mkdir(parents=True)
        con.execute(
            f"COPY ingest.raw.customers TO '{root / 'files/customers/part-0.parquet'}' (FORMAT parquet)"
        )
        # One pass: each tenth of the orders in a folder of its own (`tenth=N/`, the column not in the files).
        con.execute(
            f"COPY (SELECT *, order_id % 10 AS tenth FROM ingest.raw.orders) TO '{root / 'files/orders'}' "
            "(FORMAT parquet, PARTITION_BY (tenth))"
        )
    finally:
        con.close()


def bench(rows: int, repeat: int, work: Path, files: bool) -> None:
    ingest, warehouse, project = work / "ingest.duckdb", work / "warehouse.duckdb", work / "project"
    console.print(f"writing {rows:,} orders into {ingest} ...")
    write_sample_data(ingest, rows)
    project.mkdir()
    if files:
        write_files(ingest, work)
        text = PROJECT
        for table, pattern in PATTERNS.items():
            text = text.replace(f"{{ table: raw.{table} }}", f"{{ path: '{work / pattern}' }}")
    else:
        text = PROJECT.replace("{ table: raw.", f"{{ database: '{ingest}'\n  table: raw.")
    (project / "bench.strata").write_text(text)
    time.sleep(SETTLE_NS / 1e9 + 0.1)
    stamps = (
        [files_stamp(str(work / pattern)) for pattern in PATTERNS.values()]
        if files
        else [database_stamp(ingest)]
    )
    assert all(stamp is not None and stamp.is_settled for stamp in stamps)
    run_project(project, warehouse)
    _assert_noop(run_project(project, warehouse, only_stale=True))  # the first keeps its renderings
    mine, theirs = interleave(
        repeat,
        lambda: None,
        lambda: _assert_noop(run_project(project, warehouse, only_stale=True)),
        (lambda: scan_files(work)) if files else (lambda: scan(ingest)),
    )
    for label, timings in (
        ("no-change run (stamp as recorded)", mine),
        ("fingerprint scans of the files" if files else "fingerprint scans of the file", theirs),
    ):
        console.print(
            f"{label}: wall best {min(timings.wall):.3f} / median {statistics.median(timings.wall):.3f} s, "
            f"cpu best {min(timings.cpu):.3f} s"
        )
    console.print(
        f"ratio best / median: {min(mine.wall) / min(theirs.wall):.2f} / "
        f"{statistics.median(mine.wall) / statistics.median(theirs.wall):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", action="store_true", help="the sources as Parquet files read by `path:`")
    args = parser.parse_args()
    console.print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="strata-stamps-") as work:
        bench(args.rows, args.repeat, Path(work), args.files)
    console.print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
