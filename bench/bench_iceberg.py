"""Publication to Iceberg's cost: the shop at N orders, each scenario's in-process time with
publication off and on, in one process.

    .venv/bin/python bench/bench_iceberg.py [--rows 200000] [--dir PATH]

One sample warehouse is written, then copied once per mode (off, then `STRATA_ICEBERG_CATALOG=sqlite`),
and each copy goes through the same scenarios: the full build, a run with nothing to do, late
updates (1% of the orders changed, bench_shop's way, over every day), recent updates (0.1%, over
the last three days), an append (1,000 new orders), and a rebuild
of one day of `daily_revenue` asked for by name. Printed per scenario: seconds off, seconds on,
their ratio, and what publication wrote beside the files it registered; before them, what
importing pyiceberg and opening the catalog cost once per process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
from bench_shop import SHOP, STRATA_FILES, change_orders, load

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.engine.run import RunResult, run_project


def _day(warehouse: Path) -> str:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return str(con.execute("SELECT max(order_day) FROM main.v_daily_revenue").fetchone()[0])
    finally:
        con.close()


def scenarios(project: Path, warehouse: Path, rows: int) -> dict[str, tuple[float, RunResult]]:
    timed: dict[str, tuple[float, RunResult]] = {}

    def timed_run(name: str, **options: Any) -> None:
        started = time.perf_counter()
        result = run_project(project, warehouse, **options)
        timed[name] = (time.perf_counter() - started, result)

    timed_run("full build")
    timed_run("no change", only_stale=True)
    change_orders(warehouse, changed=max(rows // 100, 1), new=0)
    timed_run("late updates", only_stale=True)
    change_orders(warehouse, changed=max(rows // 1000, 1), new=0, recent_days=3)
    timed_run("recent updates", only_stale=True)
    change_orders(warehouse, changed=1, new=1_000)
    timed_run("append", only_stale=True)
    timed_run("one day asked for", models=["daily_revenue"], partitions=[_day(warehouse)])
    return timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench_iceberg_"))
    project = root / "shop"
    project.mkdir(parents=True, exist_ok=True)
    for name in STRATA_FILES:
        shutil.copy(SHOP / name, project / name)
    sample = root / "sample.duckdb"
    write_sample_data(sample, args.rows)
    print(f"load before: {load()}")
    # Once per process, so outside the scenarios: pyiceberg's import and the catalog's opening.
    started = time.perf_counter()
    from strata_dagster.backends.iceberg.catalog import setting_for
    from strata_dagster.backends.iceberg.publisher import open_catalog

    imported = time.perf_counter() - started
    setting = setting_for(root / "sqlite.duckdb", "sqlite")
    assert setting is not None
    open_catalog(setting)
    print(
        f"once per process: pyiceberg imported in {imported:.2f} s, catalog opened in "
        f"{time.perf_counter() - started - imported:.2f} s"
    )
    results = {}
    for mode in ("off", "sqlite"):
        warehouse = root / f"{mode}.duckdb"
        shutil.copy(sample, warehouse)
        os.environ["STRATA_ICEBERG_CATALOG"] = mode
        results[mode] = scenarios(project, warehouse, args.rows)
    print(f"{args.rows:,} orders")
    print(f"{'scenario':<20}{'off s':>8}{'on s':>8}{'ratio':>7}  publication")
    for name, (off, _) in results["off"].items():
        on, result = results["sqlite"][name]
        published = result.iceberg
        detail = (
            f"{published.files_registered} files registered, {published.rows_written:,} rows copied, "
            f"{published.bytes_written:,} bytes written"
            if published is not None
            else "-"
        )
        print(f"{name:<20}{off:>8.2f}{on:>8.2f}{on / off:>7.2f}  {detail}")
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
