"""Strata's cost on the stack teams deploy, against Dagster's own: the stock instance of
deploy/dagster.yaml on PostgreSQL and on Dagster's default SQLite storage, with dagster-webserver,
dagster-daemon and a gRPC code server as separate processes (strata_dagster_tests.support.production_stack),
driven through GraphQL as the UI drives it:

- the first *Materialize all* of the example (a Dagster backfill of every asset and partition,
  after one run observing the sources), from the request to every run of it ended and everything
  fresh;
- a backfill of 3 daily partitions of `daily_revenue` with a `strata/reason` tag (the partition
  dialog with "Add tags to backfill runs"), from the request to its runs ended.

Each request is made on the example and on a do-nothing twin of its graph (the same asset keys,
partitions, partition mappings, checks, backfill policies, pool and executor; the companions'
per-day observations logged one by one; no strata in it: `bench_dagster_path.mirror_module`), each
on a fresh instance and a fresh copy of the same warehouse. Prints both absolute times and the
example's ratio to the twin's, per storage.

    PYTHONPATH=. .venv/bin/python bench/bench_dagster_stock.py [--rows 100000] [--days 365]
        [--storage postgres sqlite] [--repeat 1]

See bench/README.md and docs/production.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from bench_dagster_path import mirror_module

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster_tests.support.dagster_support import DONE, wait_for
from strata_dagster_tests.support.production_stack import (
    SHOP,
    postgres_server,
    prepare_instance,
    production_stack,
)

print = functools.partial(print, flush=True)  # noqa: A001 (progress shows while it runs)
FINAL = ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED")
FIRST_LOAD = {"strata/reason": "first load (bench)"}  # a strata backfill needs a reason
DAYS = {"strata/reason": "bench: 3 days"}


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def workspace(root: Path, sample: Path, graph: str) -> tuple[Path, Path, Path]:
    """The example over a copy of `sample` and, for the twin, its do-nothing module beside it.
    Returns (project, warehouse, definitions)."""
    project = root / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "dagster.yaml", "__pycache__"))
    warehouse = project / "warehouse.duckdb"
    shutil.copy(sample, warehouse)
    definitions = project / "definitions.py"
    if graph == "twin":
        definitions = root / "twin.py"
        definitions.write_text(mirror_module(project, prefix="", observable_sources=True))
    return project, warehouse, definitions


def observe_sources(graphql) -> float:
    """One run observing the unpartitioned observable sources, as *Observe sources* launches it."""
    nodes = graphql("{ assetNodes { assetKey { path } isObservable isPartitioned } }")["assetNodes"]
    sources = [
        node["assetKey"]["path"][0] for node in nodes if node["isObservable"] and not node["isPartitioned"]
    ]
    begin = time.perf_counter()
    run_id = graphql.launch(sources)
    wait_for(
        lambda: _run_status(graphql, run_id) in DONE, 600, "the sources' observation", Path("/dev/null"), 0.25
    )
    assert _run_status(graphql, run_id) == "SUCCESS"
    return time.perf_counter() - begin


def _run_status(graphql, run_id: str) -> str:
    return {run["runId"]: run["status"] for run in graphql.runs()}[run_id]


def tags(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"key": key, "value": value} for key, value in values.items()]


def launch(graphql, params: dict) -> str:
    data = graphql(
        "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) { "
        "__typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }",
        p=params,
    )["launchPartitionBackfill"]
    assert data["__typename"] == "LaunchBackfillSuccess", data
    return data["backfillId"]


def until_done(stack, backfill_id: str, launched: float) -> tuple[float, float]:
    """Seconds from `launched` (epoch) to the end of the backfill's last run (everything it asked
    for fresh), once the backfill is done, and from its first run's creation (the daemon's first
    iteration after the request: up to 30 s on Dagster's clock, whatever the graph) to the same
    end; prints its runs."""

    def done() -> bool:
        found = stack.graphql.backfill(backfill_id)
        return found["status"] in FINAL and all(run["status"] in DONE for run in found["runs"])

    wait_for(done, 3600, "the backfill to finish", stack.log("daemon"), interval=0.25)
    marked = time.time() - launched
    found = stack.graphql.backfill(backfill_id)
    assert found["status"] == "COMPLETED_SUCCESS", found
    times = {run["runId"]: run for run in stack.graphql.run_records()}
    runs = sorted((times[run["runId"]] for run in found["runs"]), key=lambda run: run["creationTime"])
    for run in runs:
        print(
            f"    run {', '.join(sorted(run['assets']))[:60]:<60} created +{run['creationTime'] - launched:5.1f}s "
            f"started +{run['startTime'] - launched:5.1f}s ended +{run['endTime'] - launched:5.1f}s"
        )
    fresh = max(run["endTime"] for run in runs) - launched
    print(f"    last run ended +{fresh:.1f}s; backfill marked done +{marked:.1f}s")
    return fresh, fresh - (runs[0]["creationTime"] - launched)


def materialize_all(stack) -> tuple[float, float]:
    """*Materialize all* in the asset graph: a backfill of every materializable asset and partition."""
    nodes = stack.graphql("{ assetNodes { assetKey { path } isObservable isExecutable } }")["assetNodes"]
    keys = [node["assetKey"] for node in nodes if node["isExecutable"] and not node["isObservable"]]
    launched = time.time()
    fresh = until_done(
        stack,
        launch(stack.graphql, {"assetSelection": keys, "allPartitions": True, "tags": tags(FIRST_LOAD)}),
        launched,
    )
    stale = stack.graphql.stale()
    assert not stale, f"stale after Materialize all: {sorted(stale)[:10]}"
    return fresh


def backfill_days(stack, count: int = 3) -> tuple[float, float]:
    days = stack.graphql(
        '{ assetNodes(assetKeys: [{path: ["daily_revenue"]}]) { partitionKeysByDimension { partitionKeys } } }'
    )["assetNodes"][0]["partitionKeysByDimension"][0]["partitionKeys"][:count]
    launched = time.time()
    params = {
        "assetSelection": [{"path": ["daily_revenue"]}],
        "partitionNames": days,
        "tags": tags(DAYS),
    }
    return until_done(stack, launch(stack.graphql, params), launched)


def measure(root: Path, sample: Path, postgres, storage: str, graph: str) -> list[tuple[float, float]]:
    """Materialize all, then the 3-day backfill, of `graph` (example or twin) on a fresh stack."""
    root.mkdir()
    project, warehouse, definitions = workspace(root, sample, graph)
    home, environment = prepare_instance(root, postgres, f"bench_{uuid.uuid4().hex[:12]}")
    with production_stack(root, project, warehouse, home, environment, storage, definitions) as stack:
        print(f"  {storage} / {graph}: observe sources {observe_sources(stack.graphql):.1f}s; {load()}")
        everything = materialize_all(stack)
        print(f"  {storage} / {graph}: Materialize all {_pair(everything)}; {load()}")
        days = backfill_days(stack)
        print(f"  {storage} / {graph}: 3-day backfill with a reason {_pair(days)}; {load()}")
    return [everything, days]


def _pair(seconds: tuple[float, float]) -> str:
    return f"{seconds[0]:.1f}s to fresh ({seconds[1]:.1f}s from its first run's creation)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument(
        "--storage", nargs="+", choices=("postgres", "sqlite"), default=["postgres", "sqlite"]
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each on fresh instances")
    args = parser.parse_args()
    results: dict[tuple[str, str], list[list[tuple[float, float]]]] = {}
    with tempfile.TemporaryDirectory() as folder, ExitStack() as servers:
        root = Path(folder)
        sample = root / "sample.duckdb"
        write_sample_data(sample, args.rows, days=args.days)
        postgres = servers.enter_context(postgres_server()) if "postgres" in args.storage else None
        print(f"{args.rows} orders over {args.days} days; {load()}")
        for round_ in range(1, args.repeat + 1):
            for storage in args.storage:
                for graph in ("twin", "example"):
                    where = root / f"{storage}_{graph}_{round_}"
                    server = postgres if storage == "postgres" else None
                    results.setdefault((storage, graph), []).append(
                        measure(where, sample, server, storage, graph)
                    )
    for storage in args.storage:
        example, twin = results[(storage, "example")], results[(storage, "twin")]
        for index, request in enumerate(("Materialize all", "3-day backfill with a reason")):
            for part, measured in enumerate(("request to fresh", "first run created to fresh")):
                ours = [rounds[index][part] for rounds in example]
                theirs = [rounds[index][part] for rounds in twin]
                ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
                print(
                    f"{storage:8} {request:<28} {measured:<27} example {_figures(ours)}  twin {_figures(theirs)}  "
                    f"ratio {', '.join(f'{ratio:.2f}' for ratio in ratios)} (median {statistics.median(ratios):.2f})"
                )


def _figures(seconds: list[float]) -> str:
    return ", ".join(f"{value:.1f}s" for value in seconds)


if __name__ == "__main__":
    main()
