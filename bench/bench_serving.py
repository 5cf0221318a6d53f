"""What the serving copy costs the writer, and what readers get from it (issue 19).

    python bench/bench_serving.py --rows 1000000

On the shop example with N orders it measures:
- the serving refresh inside a full build, a 1% incremental run and a no-change run (seconds spent
  exporting snapshots to Parquet and switching the catalog, against the run's total);
- an incremental run alone, then with 4 reader processes polling every view every 50 ms through
  the serving copy (the run's delay, and the readers' errors: none expected);
- for comparison, the same readers opening the warehouse file itself, as before issue 19 (their
  lock errors, and whether the run still finished).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata_dagster.engine.run import run_project  # noqa: E402
from strata_dagster.warehouse import serving  # noqa: E402
from strata_dagster_tests.engine_support import ADVANCE_UPDATED_AT, execute, make_shop  # noqa: E402

READER = """
import duckdb, sys, time, json
target, mode, stop = sys.argv[1], sys.argv[2], sys.argv[3]
ok = errors = 0
import os
while not os.path.exists(stop):
    try:
        if mode == "serving":
            con = duckdb.connect(config={"threads": 1}); con.execute(sys.argv[4])
        else:
            con = duckdb.connect(target, read_only=True, config={"threads": 1})
        views = con.execute("SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal AND starts_with(view_name, 'v_') AND schema_name = 'main'").fetchall()
        for schema, view in views:
            con.execute(f'SELECT count(*) FROM "{schema}"."{view}"').fetchall()
        con.close(); ok += 1
    except Exception:
        errors += 1
    time.sleep(0.05)
print(json.dumps({"ok": ok, "errors": errors}))
"""

refresh_seconds: list[float] = []
_refresh = serving.refresh


def _timed_refresh(*args, **kwargs):
    started = time.perf_counter()
    try:
        return _refresh(*args, **kwargs)
    finally:
        refresh_seconds.append(time.perf_counter() - started)


serving.refresh = _timed_refresh  # measured, not changed: the session calls it through the module


cpu_seconds: list[float] = []


def timed_run(project: Path, warehouse: Path, **kwargs) -> tuple[float, float]:
    """Wall seconds of one run and of its serving refresh; its CPU seconds go to `cpu_seconds`."""
    refresh_seconds.clear()
    started, cpu = time.perf_counter(), time.process_time()
    run_project(project, warehouse, **kwargs)
    cpu_seconds.append(time.process_time() - cpu)
    return time.perf_counter() - started, sum(refresh_seconds)


def change_one_percent(warehouse: Path, rows: int, round_: int) -> None:
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 100 = {round_ % 100}",
    )


def with_readers(mode: str, warehouse: Path, folder: Path, action) -> tuple[object, list[dict]]:
    stop = folder / f"stop-{mode}"
    stop.unlink(missing_ok=True)
    args = [
        sys.executable,
        "-c",
        READER,
        str(warehouse),
        mode,
        str(stop),
        serving.reader_statement(warehouse),
    ]
    readers = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    time.sleep(1.0)  # the readers are polling before the run starts
    try:
        result = action()
    except Exception as error:  # noqa: BLE001 - the old design's failure is the figure
        result = f"failed: {str(error).splitlines()[0]}"
    stop.touch()
    counts = [json.loads(reader.communicate()[0]) for reader in readers]
    return result, counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=options.dir) as temp:
        folder = Path(temp)
        project, warehouse = make_shop(folder, rows=options.rows)
        total, refresh = timed_run(project, warehouse)
        print(
            f"full build        {total:7.2f} s, of which serving refresh {refresh:6.2f} s ({refresh / total:.0%})"
        )
        total, refresh = timed_run(project, warehouse, only_stale=True)
        print(f"no-change run     {total:7.2f} s, of which serving refresh {refresh:6.2f} s")
        alone, busy, delays = [], [], []
        for round_ in range(options.repeat):
            change_one_percent(warehouse, options.rows, 2 * round_)
            total, refresh = timed_run(project, warehouse, only_stale=True)
            alone.append(total)
            cpu_alone = cpu_seconds[-1]
            print(
                f"1% incremental    {total:7.2f} s ({cpu_alone:.2f} s CPU), of which serving refresh {refresh:6.2f} s"
            )
            change_one_percent(warehouse, options.rows, 2 * round_ + 1)
            (total, refresh), counts = with_readers(
                "serving", warehouse, folder, lambda: timed_run(project, warehouse, only_stale=True)
            )
            busy.append(total)
            delays.append(total / alone[-1] - 1)
            polls = sum(count["ok"] for count in counts)
            errors = sum(count["errors"] for count in counts)
            print(
                f"  with 4 readers  {total:7.2f} s ({delays[-1]:+.0%}; {cpu_seconds[-1]:.2f} s CPU, "
                f"{cpu_seconds[-1] / cpu_alone - 1:+.0%}); readers: {polls} polls, {errors} errors"
            )
        print(
            f"median 1% run {statistics.median(alone):.2f} s alone, {statistics.median(busy):.2f} s with 4 "
            f"serving readers ({statistics.median(delays):+.0%})"
        )
        change_one_percent(warehouse, options.rows, 99)
        os.environ["STRATA_LOCK_TIMEOUT"] = "10"
        result, counts = with_readers(
            "warehouse", warehouse, folder, lambda: timed_run(project, warehouse, only_stale=True)
        )
        polls = sum(count["ok"] for count in counts)
        errors = sum(count["errors"] for count in counts)
        print(
            f"before issue 19 (readers open the warehouse file): run {result}; readers {polls} ok, {errors} errors"
        )


if __name__ == "__main__":
    main()
