"""What serving readers costs the writer, and what readers get (issue 19).

    PYTHONPATH=. .venv/bin/python bench/bench_serving.py --rows 300000 --repeat 3

On the shop example with N orders it measures:
- the serving refresh inside a full build, a no-change run and a 1% incremental run (seconds
  spent exporting snapshots to Parquet, when they are tables, and switching the catalog, against
  the run's total);
- 1% incremental runs alone and with 4 reader processes polling every view of `main` through the
  serving copy, alternating, in three reader set-ups:
    `50ms`       every 50 ms at the writer's priority (the issue's load: 4 processes scanning every
                 view 20 times a second compete for the 2 cores like any other work would);
    `50ms nice`  the same readers at nice 19 (they get the CPU the writer leaves: what remains of
                 the delay is what readers do to the writer, not what they take from the machine);
    `1s`         every second at the writer's priority (a dashboard's refresh rate);
  for each: the run's wall and CPU seconds against the runs alone just before, and the readers'
  polls and errors (none expected);
- for comparison, the same readers opening the warehouse file itself, as before issue 19 (their
  lock errors, and whether the run still finished).
The load average is printed with every figure: on a shared machine, only same-run ratios count.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: a commit exported there wins

from strata_dagster.backends.duckdb import serving  # noqa: E402
from strata_dagster.engine.run import run_project  # noqa: E402
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, execute, make_shop  # noqa: E402

READER = """
import duckdb, sys, time, json, os
target, mode, stop, statement, pause = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
ok = errors = 0
while not os.path.exists(stop):
    try:
        if mode == "serving":
            con = duckdb.connect(config={"threads": 1}); con.execute(statement)
        else:
            con = duckdb.connect(target, read_only=True, config={"threads": 1})
        views = con.execute("SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal AND starts_with(view_name, 'v_') AND schema_name = 'main'").fetchall()
        for schema, view in views:
            con.execute(f'SELECT count(*) FROM "{schema}"."{view}"').fetchall()
        con.close(); ok += 1
    except Exception:
        errors += 1
    time.sleep(pause)
print(json.dumps({"ok": ok, "errors": errors}))
"""
READER_SETUPS = {"50ms": (0.05, 0), "50ms nice": (0.05, 19), "1s": (1.0, 0)}

refresh_seconds: list[float] = []
_refresh = serving.refresh


def _timed_refresh(*args, **kwargs):
    started = time.perf_counter()
    try:
        return _refresh(*args, **kwargs)
    finally:
        refresh_seconds.append(time.perf_counter() - started)


serving.refresh = _timed_refresh  # measured, not changed: the session calls it through the module


def load() -> str:
    return "load " + " ".join(f"{value:.1f}" for value in os.getloadavg())


def timed_run(project: Path, warehouse: Path, **kwargs) -> tuple[float, float, float]:
    """Wall seconds of one run, CPU seconds of this process during it, seconds of its serving refresh."""
    refresh_seconds.clear()
    started, cpu = time.perf_counter(), time.process_time()
    run_project(project, warehouse, **kwargs)
    return time.perf_counter() - started, time.process_time() - cpu, sum(refresh_seconds)


def change_one_percent(warehouse: Path, round_: int) -> None:
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 100 = {round_ % 100}",
    )


def with_readers(mode: str, warehouse: Path, folder: Path, pause: float, niceness: int, action):
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
    readers = [
        subprocess.Popen(
            [*args, str(pause)],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=(lambda: os.nice(niceness)) if niceness else None,
        )
        for _ in range(4)
    ]
    time.sleep(1.0)  # the readers are polling before the run starts
    try:
        result = action()
    except Exception as error:  # noqa: BLE001 - the old design's failure is the figure
        result = f"failed: {str(error).splitlines()[0]}"
    stop.touch()
    counts = [json.loads(reader.communicate()[0].strip().splitlines()[-1]) for reader in readers]
    return result, sum(count["ok"] for count in counts), sum(count["errors"] for count in counts)


def runs_alone(project: Path, warehouse: Path, runs: int) -> None:
    """1% runs one after another: each run's wall and CPU seconds and its serving refresh's."""
    refreshes, shares, cpus = [], [], []
    for round_ in range(1, runs + 1):
        change_one_percent(warehouse, round_)
        wall, cpu, refresh = timed_run(project, warehouse, only_stale=True)
        refreshes.append(refresh)
        shares.append(refresh / (wall - refresh))
        cpus.append(cpu)
        print(
            f"[{round_}] 1% run {wall:6.3f} s ({cpu:.3f} CPU), serving refresh {refresh * 1000:5.1f} ms "
            f"= {refresh / (wall - refresh):+.1%} on the run without it; {load()}"
        )
    print(
        f"1% runs: serving refresh median {statistics.median(refreshes) * 1000:.1f} ms "
        f"(min {min(refreshes) * 1000:.1f}), median {statistics.median(shares):+.1%} on the run without it; "
        f"run CPU median {statistics.median(cpus):.3f} s; {load()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-old-design", action="store_true", help="skip the readers opening the warehouse")
    parser.add_argument(
        "--no-readers",
        action="store_true",
        help="only the 1%% runs alone (3 per repeat): the serving refresh's seconds and share, no reader set-ups",
    )
    options = parser.parse_args()
    print(f"strata_dagster from {Path(serving.__file__).parents[1]}, {options.rows:,} orders, {load()}")
    with tempfile.TemporaryDirectory(dir=options.dir) as temp:
        folder = Path(temp)
        project, warehouse = make_shop(folder, rows=options.rows)
        wall, cpu, refresh = timed_run(project, warehouse)
        print(
            f"full build      {wall:7.2f} s, serving refresh {refresh:6.2f} s ({refresh / wall:.0%}); {load()}"
        )
        wall, cpu, refresh = timed_run(project, warehouse, only_stale=True)
        print(f"no-change run   {wall:7.2f} s, serving refresh {refresh:6.2f} s; {load()}")
        rounds = itertools.count(1)
        shares = []
        if options.no_readers:
            runs_alone(project, warehouse, options.repeat * len(READER_SETUPS))
            return
        delays: dict[str, list[tuple[float, float]]] = {name: [] for name in READER_SETUPS}
        for repeat in range(options.repeat):
            for name, (pause, niceness) in READER_SETUPS.items():
                # Each 1% run costs more than the one before (the states gain segments until a
                # compaction): the run with readers goes first in every other repeat, so that
                # growth does not count as the readers' delay.
                readers_first = repeat % 2 == 1

                def alone() -> tuple[float, float, float]:
                    change_one_percent(warehouse, next(rounds))
                    return timed_run(project, warehouse, only_stale=True)

                def with_four(
                    pause: float = pause, niceness: int = niceness
                ) -> tuple[tuple[float, float, float], int, int]:
                    change_one_percent(warehouse, next(rounds))
                    return with_readers(
                        "serving",
                        warehouse,
                        folder,
                        pause,
                        niceness,
                        lambda: timed_run(project, warehouse, only_stale=True),
                    )

                if readers_first:
                    (wall, cpu, _), polls, errors = with_four()
                    alone_wall, alone_cpu, refresh = alone()
                else:
                    alone_wall, alone_cpu, refresh = alone()
                    (wall, cpu, _), polls, errors = with_four()
                shares.append(refresh / alone_wall)
                delays[name].append((wall / alone_wall - 1, cpu / alone_cpu - 1))
                order = "readers first" if readers_first else "alone first"
                print(
                    f"[{repeat + 1}] 1% run alone {alone_wall:6.2f} s ({alone_cpu:.2f} CPU, refresh {refresh:.2f} s); "
                    f"with 4 readers {name:>9}: {wall:6.2f} s ({wall / alone_wall - 1:+.0%}; CPU {cpu:.2f}, "
                    f"{cpu / alone_cpu - 1:+.0%}); {order}; readers {polls} polls, {errors} errors; {load()}"
                )
        print(f"serving refresh in a 1% run: median {statistics.median(shares):.0%} of the run")
        for name, figures in delays.items():
            print(
                f"4 readers {name:>9}: median delay of the run's wall time {statistics.median(w for w, _ in figures):+.0%}, "
                f"of its CPU time {statistics.median(c for _, c in figures):+.0%}"
            )
        if options.no_old_design:
            return
        change_one_percent(warehouse, 99)
        os.environ["STRATA_LOCK_TIMEOUT"] = "10"
        result, polls, errors = with_readers(
            "warehouse", warehouse, folder, 0.05, 0, lambda: timed_run(project, warehouse, only_stale=True)
        )
        print(
            f"before issue 19 (readers open the warehouse file): run {result}; readers {polls} ok, {errors} errors"
        )


if __name__ == "__main__":
    main()
