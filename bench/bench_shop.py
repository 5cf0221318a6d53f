"""Shop benchmark: the example project (examples/shop) at N orders, its first build against an
incremental run after 0.2% of the orders changed and 0.1% new, and the per-model seconds of each.

    .venv/bin/python bench/bench_shop.py [--rows 5000000] [--changed N] [--new N] [--dir PATH]

In a temp dir: a copy of the shop's `.strata` files, `strata sample-data` at N orders, one first
build (`run_project`, timed), then 0.2% of the orders (`--changed`), spread over the whole table,
change the way the shop's writers change them (a quarter of them cancelled, the others moved on to
`shipped` with a new amount, `updated_at` advanced past every earlier stamp) and 0.1% new orders
arrive (`--new`), and `run_project(only_stale=True)` is timed. The floor is plain DuckDB doing the
first build's work (`CREATE TABLE AS` of every model's compiled query, in dependency order, one
connection). After the incremental run every model is compared with a full recomputation (`strata
verify`'s engine call); a difference fails the bench. The load average is printed before and after.

With `--processes`, the first build and the incremental run are timed again as whole `strata run`
processes (Python's start and the imports included, bytecode cached by an untimed round on a small
copy first), on another copy of the same sources given the same change, and checked the same way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
from bench_cli import STRATA, timed
from bench_engine import execute, floor_statements

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.run import run_project
from strata_dagster.language import load_project

SHOP = Path(__file__).resolve().parent.parent / "examples" / "shop"
STRATA_FILES = ("sources.strata", "staging.strata", "marts.strata")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def change_orders(warehouse: Path, changed: int, new: int, recent_days: int | None = None) -> None:
    """`changed` orders spread evenly over the table (or over the orders of its last
    `recent_days` days) move on (a quarter cancelled, the rest shipped with a new amount), and
    `new` orders arrive; every stamp is after the last one."""
    con = duckdb.connect(str(warehouse))
    try:
        total, high, last_day = con.execute(
            "SELECT count(*), max(updated_at), max(order_ts)::DATE FROM raw.orders"
        ).fetchone()
        among, candidates = "TRUE", total
        if recent_days is not None:
            among = f"order_ts >= DATE '{last_day}' - INTERVAL {recent_days - 1} DAY"
            candidates = con.execute(f"SELECT count(*) FROM raw.orders WHERE {among}").fetchone()[0]
        con.execute(
            "UPDATE raw.orders SET status = CASE WHEN order_id % 4 = 0 THEN 'cancelled' ELSE 'shipped' END, "
            "amount = amount + 1, updated_at = ?::TIMESTAMP + to_seconds(order_id % 3600) "
            f"WHERE order_id IN (SELECT order_id FROM (SELECT order_id, row_number() OVER (ORDER BY order_id) AS n "
            f"FROM raw.orders WHERE {among}) WHERE n % ? = 1 LIMIT ?)",
            [high, max(1, candidates // changed), changed],
        )
        con.execute(
            "INSERT INTO raw.orders SELECT order_id + ?, customer_id, order_ts + INTERVAL 1 DAY, "
            "?::TIMESTAMP + INTERVAL 2 HOUR, 'paid', amount, channel, tags FROM raw.orders "
            "ORDER BY order_id DESC LIMIT ?",
            [total, high, new],
        )
    finally:
        con.close()


def floor_build(project_dir: Path, source: Path, target: Path) -> float:
    """Plain DuckDB CTAS of every model's compiled SQL, in build order, on a copy of the sources."""
    shutil.copyfile(source, target)
    statements = floor_statements(project_dir, target, tuple(load_project(project_dir).order))
    os.sync()
    started = time.perf_counter()
    execute(target, statements)
    return time.perf_counter() - started


def as_processes(
    project: Path, work: Path, sources: Path, change: tuple[int, int, int | None]
) -> tuple[float, float]:
    """Wall seconds of the first build and of the incremental run after `change` (changed, new,
    recent days), each a whole `strata run` process on a fresh copy of `sources`, verified."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / "pycache"), "DAGSTER_DISABLE_TELEMETRY": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = [sys.executable, "-c", STRATA, "run", str(project), "--warehouse"]

    def both_runs(warehouse: Path, change: tuple[int, int, int | None]) -> tuple[float, float]:
        os.sync()
        first = timed([*run, str(warehouse)], env)[0]
        change_orders(warehouse, *change)
        os.sync()
        return first, timed([*run, str(warehouse), "--only-stale"], env)[0]

    write_sample_data(work / "warm-up.duckdb", 1000)
    both_runs(work / "warm-up.duckdb", (1, 1, None))  # untimed: writes the bytecode
    warehouse = work / "processes.duckdb"
    shutil.copyfile(sources, warehouse)
    seconds = both_runs(warehouse, change)
    report = verify(project, warehouse, branch=DEFAULT_BRANCH)
    if any(not model.is_equal for model in report.models):
        raise SystemExit("verify after the processes' runs: DIFFERENT")
    return seconds


def per_model(result) -> dict[str, tuple[str, float]]:
    return {o.model: (o.path, o.duration_ms / 1000) for o in result.outcomes}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--changed", type=int, default=None, help="default: 0.2%% of --rows")
    parser.add_argument("--new", type=int, default=None, help="default: 0.1%% of --rows")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--processes", action="store_true", help="also time both runs as whole processes")
    parser.add_argument(
        "--recent-days",
        type=int,
        default=None,
        help="change orders of the last N days only (default: spread over the whole table)",
    )
    args = parser.parse_args()
    if args.changed is None:
        args.changed = max(1, args.rows // 500)
    if args.new is None:
        args.new = max(1, args.rows // 1000)
    print(f"load average before: {load()}  (nproc {os.cpu_count()}, duckdb {duckdb.__version__})")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        project = work / "shop"
        project.mkdir()
        for name in STRATA_FILES:
            shutil.copyfile(SHOP / name, project / name)
        sources = work / "sources.duckdb"
        started = time.perf_counter()
        write_sample_data(sources, args.rows)
        print(f"sample data: {args.rows:,} orders in {time.perf_counter() - started:.1f} s")
        floor = floor_build(project, sources, work / "floor.duckdb")
        warehouse = work / "shop.duckdb"
        shutil.copyfile(sources, warehouse)
        os.sync()
        started = time.perf_counter()
        first = run_project(project, warehouse)
        first_s = time.perf_counter() - started
        change_orders(warehouse, args.changed, args.new, args.recent_days)
        os.sync()
        started = time.perf_counter()
        incremental = run_project(project, warehouse, only_stale=True)
        incremental_s = time.perf_counter() - started
        load_after = load()
        firsts, increments = per_model(first), per_model(incremental)
        print(f"\n{'model':20} {'first s':>9} {'incremental s':>14}  path (incremental)")
        for name, (path, seconds) in increments.items():
            print(f"{name:20} {firsts.get(name, ('', 0.0))[1]:9.2f} {seconds:14.2f}  {path}")
        for name in increments:
            reason = incremental.outcome(name).detail.get("full_reason")
            if reason:
                print(f"  {name}: full_reason: {reason}")
        print(
            f"\nfirst build {first_s:.2f} s (floor CTAS {floor:.2f} s, {first_s / floor:.2f}x); "
            f"incremental after {args.changed:,} changed "
            f"({'over the last ' + str(args.recent_days) + ' days' if args.recent_days else 'spread over every day'}) "
            f"+ {args.new} new orders {incremental_s:.2f} s: "
            f"{incremental_s / first_s:.3f} of the first build (target <= 0.25)"
        )
        print(f"load average after: {load_after}")
        if not args.no_verify:
            report = verify(project, warehouse, branch=DEFAULT_BRANCH)
            bad = [m.model for m in report.models if not m.is_equal]
            print("verify:", "all equal" if not bad else f"DIFFERENT: {bad}")
            if bad:
                return 1
        if args.processes:
            first_p, incremental_p = as_processes(
                project, work, sources, (args.changed, args.new, args.recent_days)
            )
            print(
                f"as whole `strata run` processes: first build {first_p:.2f} s, incremental "
                f"{incremental_p:.2f} s: {incremental_p / first_p:.3f} of the first build (target <= 0.25); "
                "verify: all equal"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
