"""Command-line start-up benchmark: `strata --help`, and a no-change `strata run --only-stale` on the
shop example after one full build, each as a whole process, against `python -c pass` in the same run.

    /work/main/.venv/bin/python bench/bench_cli.py [--rows 100000] [--repeat 10] [--dir /tmp]

The three commands alternate, `--repeat` times each. Wall seconds (from starting the process to
reaping it) and CPU seconds (user + system of the process, from os.wait4) are given as the median
and the least; the ratio is the command's median over `python -c pass`'s median. The processes use
bytecode cached in the temp dir (as an installed package does), warmed up by one untimed round.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHOP = Path(__file__).resolve().parent.parent / "examples" / "shop"
TARGETS = {"strata --help": 0.3, "strata run --only-stale (no change)": 0.6}  # wall seconds, issue 45
# The console script's body, so that PYTHONPATH can put another tree first (bench/README.md).
STRATA = "import sys; sys.argv[0] = 'strata'; from strata_dagster.cli.entry import run; run()"


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall and CPU seconds of one process running `command`, and what it printed."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read() if process.stdout is not None else b""
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{output.decode()}")
    return wall, usage.ru_utime + usage.ru_stime, output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="orders in the shop's sample data")
    parser.add_argument("--repeat", type=int, default=10, help="timed processes per command")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as temp:
        root = Path(temp)
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(root / "pycache"), "DAGSTER_DISABLE_TELEMETRY": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        project = root / "shop"
        shutil.copytree(
            SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "__pycache__", "dagster_home")
        )
        warehouse = str(root / "warehouse.duckdb")
        strata = [sys.executable, "-c", STRATA]
        timed([*strata, "sample-data", str(project), "--warehouse", warehouse, "--rows", str(args.rows)], env)
        timed([*strata, "run", str(project), "--warehouse", warehouse], env)  # the one full build

        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "strata --help": [*strata, "--help"],
            "strata run --only-stale (no change)": [
                *strata,
                "run",
                str(project),
                "--warehouse",
                warehouse,
                "--only-stale",
            ],
        }
        for command in commands.values():  # untimed: writes the bytecode
            timed(command, env)
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():
                wall, cpu, output = timed(command, env)
                if name.startswith("strata run") and b"nothing to do" not in output:
                    raise SystemExit(f"the no-change run built something:\n{output.decode()}")
                walls[name].append(wall)
                cpus[name].append(cpu)

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"{args.repeat} processes each, {os.cpu_count()} CPUs, load average {load}; seconds (median / least)"
    )
    base_wall, base_cpu = (
        statistics.median(walls["python -c pass"]),
        statistics.median(cpus["python -c pass"]),
    )
    print(f"{'':38} {'wall':>13} {'cpu':>13} {'wall ratio':>11} {'cpu ratio':>10} {'target (wall)':>14}")
    for name in commands:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        target = f"{TARGETS[name]:.1f}" if name in TARGETS else ""
        print(
            f"{name:38} {wall:6.3f}/{min(walls[name]):6.3f} {cpu:6.3f}/{min(cpus[name]):6.3f} "
            f"{wall / base_wall:10.1f}x {cpu / base_cpu:9.1f}x {target:>14}"
        )


if __name__ == "__main__":
    main()
