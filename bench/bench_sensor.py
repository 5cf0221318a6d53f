"""Sensor benchmark: the wall time of idle ticks of `strata_materialize_stale` (nothing changed) on
the shop example at its test size (40 days) and at 3,650 daily partitions, with a real (ephemeral)
Dagster instance in which everything is materialized.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_sensor.py [--days 40 3650] [--ticks 5] [--rows 20000]

Each tick is timed around `evaluate_tick`, the sources' fingerprints and the instance queries
included. See bench/README.md.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.orchestration.sensors.stale_sensor import STALE_SENSOR_NAME
from strata_dagster_tests.support.dagster_support import (
    change_order,
    launch_in_process,
    make_small_shop,
    materialize_everything,
)
from strata_dagster_tests.support.engine_support import execute


def idle_ticks(days: int, rows: int, ticks: int, root: Path) -> tuple[float, list[float], int]:
    """Seconds to set up, the tick times, and how many runs the idle ticks requested."""
    start = time.perf_counter()
    project, warehouse = make_small_shop(root, rows=rows, days=days)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    materialize_everything(defs, instance)
    setup = time.perf_counter() - start
    begin = time.perf_counter()
    stale_partitions(project, warehouse)
    print(
        f"{days:>5} days: the engine's stale partitions of every partitioned model: {time.perf_counter() - begin:.3f}s"
    )
    sensor = defs.resolve_sensor_def(STALE_SENSOR_NAME)
    repository = defs.get_repository_def()
    cursor = None
    reading: list[float] = []  # the first reading of every stale status, spread over ticks
    while True:
        context = dg.build_sensor_context(instance=instance, repository_def=repository, cursor=cursor)
        begin = time.perf_counter()
        result = sensor.evaluate_tick(context)
        reading.append(time.perf_counter() - begin)
        cursor = result.cursor
        if not (result.skip_message or "").startswith("Reading"):
            break
    times, requested = [], 0
    for _ in range(ticks):
        context = dg.build_sensor_context(instance=instance, repository_def=repository, cursor=cursor)
        begin = time.perf_counter()
        result = sensor.evaluate_tick(context)
        times.append(time.perf_counter() - begin)
        cursor = result.cursor
        requested += len(result.run_requests)
    changed = _after_a_change(defs, instance, warehouse, sensor, repository, cursor)
    return setup, reading, times, requested, changed


def _after_a_change(defs, instance, warehouse, sensor, repository, cursor) -> list[float]:  # type: ignore[no-untyped-def]  # Dagster's objects, as the caller has them
    """Tick times after one order changed: the tick that asks for its observation, then (after the
    observation ran, untimed) the tick that plans the rebuild from the cursor."""
    order = execute(warehouse, "SELECT min(order_id) FROM raw.orders WHERE status = 'paid'")[0][0]
    change_order(warehouse, order)
    times = []
    for _ in range(2):
        context = dg.build_sensor_context(instance=instance, repository_def=repository, cursor=cursor)
        begin = time.perf_counter()
        result = sensor.evaluate_tick(context)
        times.append(time.perf_counter() - begin)
        cursor = result.cursor
        for request in result.run_requests[:1]:
            names = [key.to_user_string() for key in request.asset_selection]
            launch_in_process(defs, instance, names, job=request.job_name, tags=dict(request.tags))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, nargs="+", default=[40, 3650])
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    for days in args.days:
        with tempfile.TemporaryDirectory() as folder:
            setup, reading, times, requested, changed = idle_ticks(days, args.rows, args.ticks, Path(folder))
        print(
            f"{days:>5} days, {args.rows} orders: set-up {setup:.1f}s; first reading of every stale "
            f"status: {len(reading)} ticks, {sum(reading):.1f}s in all, longest {max(reading):.2f}s; "
            f"idle ticks median {statistics.median(times):.3f}s, max {max(times):.3f}s; "
            f"runs requested {requested}; after one changed order: observe tick {changed[0]:.3f}s, "
            f"rebuild tick {changed[1]:.3f}s"
        )


if __name__ == "__main__":
    main()
