"""Business-driven versioning benchmark: a hive-partitioned Parquet folder of daily partitions,
versioned `append_only_partitions`, read by an append model and a day-partitioned aggregate.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_business.py [--days 90] [--rows-per-day 20000]
    PYTHONPATH=.:bench .venv/bin/python bench/bench_business.py --full   # 365 days, 50M+ rows, 3,650 too

It reports, in one run:
(a) the no-change decision (`strata run --only-stale` with nothing new: listing, footers, ledger
    check, project load included), and the ledger check alone, at `--days` partitions and (with
    `--flat-days`) at that many small partitions, the two interleaved run by run;
(b) one new daily folder arriving: strata's run against a floor that reads only the new folder and
    appends and aggregates it by hand into copies of the two models;
(c) the same change with `versioning: full` on the same files (a whole-row hash of every file).
Each strata result is checked against a full recomputation (row-hash multisets) before its time
counts. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

import strata_dagster
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.context import load_context
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources import business

try:  # the listing cache; absent from engines before it (the bench also measures those)
    from strata_dagster.backends.duckdb.listing import RACY_SECONDS
except ImportError:
    RACY_SECONDS = 0.0

START = dt.date(2024, 1, 1)
GATED = """  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true"""
MODULE = """
source events {
  path: '%(path)s'
  partitioned_by: dt
  start: 2024-01-01
%(versioning)s
}
model events_log {
  from events
  incremental
  merge_strategy: append
  cdc_column: dt
}
model daily_totals {
  from events
  group dt
  aggregate n = count(*), total = sum(amount), users = count(distinct user_id)
  partitioned_by: day(dt)
}
"""


def write_days(folder: Path, first: int, days: int, rows_per_day: int) -> None:
    """`days` daily folders `dt=YYYY-MM-DD/` from day `first`, `rows_per_day` rows each, in one COPY."""
    con = duckdb.connect()
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute(
            f"""COPY (
                SELECT d * {rows_per_day} + r AS id, (hash(d, r) % 100000)::BIGINT AS user_id,
                       (hash(r, d) % 1000)::DOUBLE / 10 AS amount, DATE '{START}' + d::INTEGER AS dt
                FROM range({first}, {first + days}) t(d), range({rows_per_day}) s(r)
            ) TO '{folder}' (FORMAT parquet, PARTITION_BY (dt), APPEND)"""
        )
    finally:
        con.close()


def make_project(root: Path, events: Path, versioning: str) -> tuple[Path, Path]:
    project = root / "project"
    project.mkdir(parents=True)
    (project / "events.strata").write_text(
        MODULE % {"path": f"{events}/*/*.parquet", "versioning": versioning}
    )
    return project, root / "w.duckdb"


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    value = call()
    return time.perf_counter() - started, value


def check(warehouse: Path, events: Path) -> None:
    """The live models equal a full recomputation over every file."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        source = f"read_parquet('{events}/*/*.parquet', hive_partitioning = true)"
        pairs = (
            ("main.v_events_log", f"SELECT id, user_id, amount, dt FROM {source}"),
            (
                "SELECT dt, n, round(total, 4), users FROM main.v_daily_totals",
                f"SELECT dt, count(*) AS n, round(sum(amount), 4) AS total, count(DISTINCT user_id) AS users FROM {source} GROUP BY dt",
            ),
        )
        # A DOUBLE sum depends on the order DuckDB's threads add the rows in: two full recomputes
        # of a day of several row groups can differ in the last bits, so totals compare rounded.
        for live, full in pairs:
            query = "SELECT count(*), sum(hash(r)) FROM ({}) r"
            a = con.execute(
                query.format(live if live.startswith("SELECT") else f"SELECT * FROM {live}")
            ).fetchone()
            b = con.execute(query.format(full)).fetchone()
            assert a == b, (live, a, b)
    finally:
        con.close()


def ledger_check_seconds(project: Path, warehouse: Path) -> float:
    """The ledger check alone: list folders and footers, compare with the ledger."""
    with open_session(warehouse) as session:
        context = load_context(session, project, {})
        seconds, _ = timed(
            lambda: business.read_business_source(session, context, "events", is_full_refresh=False)
        )
        return seconds


def connect_seconds(warehouse: Path) -> float:
    """DuckDB's own fixed cost: open the warehouse file for writing and close it, nothing else."""
    started = time.perf_counter()
    duckdb.connect(str(warehouse)).close()
    return time.perf_counter() - started


def hash_rate(events: Path) -> float:
    """Rows per second DuckDB hashes whole rows of the folder at (what `versioning: full` pays)."""
    con = duckdb.connect()
    try:
        source = f"read_parquet('{events}/*/*.parquet', hive_partitioning = true)"
        started = time.perf_counter()
        rows, _ = con.execute(f"SELECT count(*), sum(hash(t)::HUGEINT) FROM {source} t").fetchone()
        return rows / (time.perf_counter() - started)
    finally:
        con.close()


def floor_seconds(floor_db: Path, new_folder: Path) -> float:
    """Read only the new folder; append it to a copy of the log and aggregate it into the totals."""
    started = time.perf_counter()
    con = duckdb.connect(str(floor_db))
    try:
        source = f"read_parquet('{new_folder}/*.parquet', hive_partitioning = true)"
        con.execute("BEGIN")
        con.execute(f"INSERT INTO log SELECT id, user_id, amount, dt FROM {source}")
        con.execute(
            f"INSERT INTO totals SELECT dt, count(*), sum(amount), count(DISTINCT user_id) FROM {source} GROUP BY dt"
        )
        con.execute("COMMIT")
    finally:
        con.close()
    return time.perf_counter() - started


def make_floor(floor_db: Path, warehouse: Path) -> None:
    con = duckdb.connect(str(floor_db))
    try:
        con.execute(f"ATTACH '{warehouse}' AS w (READ_ONLY)")
        con.execute("CREATE TABLE log AS SELECT * FROM w.main.v_events_log")
        con.execute("CREATE TABLE totals AS SELECT * FROM w.main.v_daily_totals")
    finally:
        con.close()


@dataclass
class Side:
    """One hive folder and its strata project, built and up to date."""

    root: Path
    days: int
    rows_per_day: int
    events: Path
    project: Path
    warehouse: Path


def prepare(root: Path, days: int, rows_per_day: int) -> Side:
    events = root / "events"
    started = time.perf_counter()
    write_days(events, 0, days, rows_per_day)
    print(
        f"wrote {days} folders, {days * rows_per_day:,} rows in {time.perf_counter() - started:.1f}s",
        flush=True,
    )
    project, warehouse = make_project(root / "business", events, GATED)
    seconds, _ = timed(lambda: run_project(project, warehouse))
    print(f"first build: {seconds:.1f}s", flush=True)
    # The listing cache trusts a folder once it is older than the racy window: wait that out, as
    # three years of daily drops are, and let one run list and cache every folder settled.
    time.sleep(max(0.0, RACY_SECONDS + 0.5 - (time.perf_counter() - started)))
    run_project(project, warehouse, only_stale=True)
    return Side(root, days, rows_per_day, events, project, warehouse)


def no_change(sides: list[Side], repeat: int) -> list[dict[str, object]]:
    """(a) on every side, the sides interleaved (the one that goes first rotates), so a ratio between
    them compares runs made in the same minutes."""
    noop: list[list[float]] = [[] for _ in sides]
    cpu: list[list[float]] = [[] for _ in sides]
    ledger: list[list[float]] = [[] for _ in sides]
    connect: list[list[float]] = [[] for _ in sides]
    for step in range(repeat):
        order = list(range(len(sides)))
        order = order[step % len(order) :] + order[: step % len(order)]
        for index in order:
            side = sides[index]
            started_cpu = time.process_time()
            seconds, result = timed(
                lambda side=side: run_project(side.project, side.warehouse, only_stale=True)
            )
            cpu[index].append(time.process_time() - started_cpu)
            assert result.is_noop
            noop[index].append(seconds)
            ledger[index].append(ledger_check_seconds(side.project, side.warehouse))
            connect[index].append(connect_seconds(side.warehouse))
    return [
        {
            "days": side.days,
            "rows": side.days * side.rows_per_day,
            "noop_run": statistics.median(noop[index]),
            "noop_best": min(noop[index]),
            "noop_cpu": statistics.median(cpu[index]),
            "ledger_check": statistics.median(ledger[index]),
            "connect": statistics.median(connect[index]),
        }
        for index, side in enumerate(sides)
    ]


def arrival(side: Side, repeat: int) -> dict[str, object]:
    """(b) and (c): one new daily folder, strata against the floor and against `versioning: full`."""
    root, days, rows_per_day, events = side.root, side.days, side.rows_per_day, side.events
    project, warehouse = side.project, side.warehouse
    full_project, full_warehouse = make_project(root / "full", events, "  versioning: full")
    run_project(full_project, full_warehouse)
    floor_db = root / "floor.duckdb"
    make_floor(floor_db, warehouse)
    strata, floor, full = [], [], []
    for step in range(repeat):
        day = days + step
        write_days(events, day, 1, rows_per_day)
        new_folder = events / f"dt={START + dt.timedelta(days=day)}"
        seconds, result = timed(lambda: run_project(project, warehouse, only_stale=True))
        assert result.outcome("events_log").path == "delta", result.outcome("events_log").detail
        assert result.outcome("daily_totals").path == "partitions"
        strata.append(seconds)
        check(warehouse, events)
        floor.append(floor_seconds(floor_db, new_folder))
        seconds, _ = timed(lambda: run_project(full_project, full_warehouse, only_stale=True))
        full.append(seconds)
        check(full_warehouse, events)
    return {
        "new_partition": statistics.median(strata),
        "new_partition_best": min(strata),
        "floor": statistics.median(floor),
        "floor_best": min(floor),
        "full_versioning": statistics.median(full),
        "hash_rate": hash_rate(events),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--rows-per-day", type=int, default=20_000)
    parser.add_argument(
        "--flat-days", type=int, default=0, help="also time the no-change decision at this many partitions"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--full", action="store_true", help="365 days of 140,000 rows (51M) and 3,650 flat partitions"
    )
    args = parser.parse_args()
    if args.full:
        args.days, args.rows_per_day, args.flat_days = 365, 140_000, 3_650
    load_before = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"engine: {Path(strata_dagster.__file__).parent}", flush=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        root = Path(folder)
        (root / "main").mkdir()
        sides = [prepare(root / "main", args.days, args.rows_per_day)]
        if args.flat_days:
            (root / "flat").mkdir()
            sides.append(prepare(root / "flat", args.flat_days, 100))
        figures = no_change(sides, args.repeat)
        main_figures = {**figures[0], **arrival(sides[0], args.repeat)}
        flat = figures[1] if args.flat_days else None
    m = main_figures
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"\n{m['days']} daily partitions, {m['rows']:,} rows, {os.cpu_count()} CPUs, load average "
        f"{load_before} at the start, {load} now (1, 5, 15 min)"
    )
    print(
        f"(a) no-change run (--only-stale, nothing new): median {m['noop_run'] * 1000:.0f} ms "
        f"(best {m['noop_best'] * 1000:.0f}, process CPU {m['noop_cpu'] * 1000:.0f}); ledger check alone "
        f"{m['ledger_check'] * 1000:.0f} ms; DuckDB's connect and close alone {m['connect'] * 1000:.0f} ms"
    )
    if flat is not None:
        print(
            f"    at {flat['days']:,} partitions: no-change run median {flat['noop_run'] * 1000:.0f} ms "
            f"(best {flat['noop_best'] * 1000:.0f}, CPU {flat['noop_cpu'] * 1000:.0f}): "
            f"{flat['noop_run'] / m['noop_run']:.2f}x (best {flat['noop_best'] / m['noop_best']:.2f}x, "
            f"CPU {flat['noop_cpu'] / m['noop_cpu']:.2f}x); ledger check {flat['ledger_check'] * 1000:.0f} ms "
            f"({flat['ledger_check'] / m['ledger_check']:.2f}x)"
        )
    b, floor = m["new_partition"], m["floor"]
    print(
        f"(b) one new partition: strata median {b:.3f}s, floor {floor:.3f}s ({b / floor:.2f}x); "
        f"best {m['new_partition_best']:.3f}s / {m['floor_best']:.3f}s ({m['new_partition_best'] / m['floor_best']:.2f}x)"
    )
    rate = m["hash_rate"]
    print(
        f"(c) same with versioning: full: {m['full_versioning']:.3f}s ({m['full_versioning'] / b:.1f}x strata's (b)); "
        f"DuckDB hashes whole rows at {rate / 1e6:.0f}M rows/s here, so 20x (b) needs about "
        f"{19 * b * rate / 1e6:,.0f}M rows at this (b)"
    )


if __name__ == "__main__":
    main()
