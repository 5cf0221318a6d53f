"""The Dagster path against the CLI: the first *Materialize all* of the shop example under
`dagster dev` (webserver and daemon on 127.0.0.1, the repository's dagster.yaml), from launch to
every run finished, against `strata run` on a copy of the same warehouse; Dagster's fixed launch
cost (a run of one trivial asset in another code location of the same instance); and a backfill of
3 daily partitions. Prints the figures and the ratio to the target (2 x strata run + fixed cost).

    /work/main/.venv/bin/python bench/bench_dagster_path.py [--rows 100000] [--days 365]

Driven through GraphQL as the UI does it (strata_dagster_tests.dagster_support). See bench/README.md.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strata_dagster.warehouse.sample_data import write_sample_data
from strata_dagster_tests.dagster_support import DONE, REPO, SHOP, GraphQL, dagster_dev, wait_for

print = functools.partial(print, flush=True)  # noqa: A001 (progress shows while it runs)
FINAL = ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED")
REASON = {"strata/reason": "first load (bench)"}
TRIVIAL = """
import dagster as dg


@dg.asset
def trivial() -> None:
    return None


defs = dg.Definitions(assets=[trivial])
"""


def workspace(root: Path, rows: int, days: int) -> tuple[Path, Path, Path]:
    """The example over `rows` orders in `days` days, a trivial code location beside it, and a
    DAGSTER_HOME with the repository's dagster.yaml: (project, warehouse, home)."""
    project = root / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "__pycache__"))
    warehouse = project / "warehouse.duckdb"
    write_sample_data(warehouse, rows, days=days)
    (root / "trivial.py").write_text(TRIVIAL)
    (root / "workspace.yaml").write_text(
        "load_from:\n"
        "  - python_file:\n      relative_path: shop/definitions.py\n      location_name: shop\n"
        "  - python_file:\n      relative_path: trivial.py\n      location_name: trivial\n"
    )
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return project, warehouse, home


def strata_run(project: Path, warehouse: Path) -> float:
    """Wall time of the CLI's `strata run` on a copy of the warehouse (process start included)."""
    copy = warehouse.with_name("cli.duckdb")
    shutil.copy(warehouse, copy)
    strata = Path(sys.executable).parent / "strata"
    begin = time.perf_counter()
    subprocess.run(
        [str(strata), "run", str(project), "--warehouse", str(copy)], check=True, capture_output=True
    )
    return time.perf_counter() - begin


def launch_run(graphql: GraphQL, location: str, job: str, assets: list[str]) -> str:
    data = graphql(
        "mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
        "... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }",
        p={
            "selector": {
                "repositoryLocationName": location,
                "repositoryName": "__repository__",
                "jobName": job,
                "assetSelection": [{"path": [name]} for name in assets],
            }
        },
    )["launchRun"]
    assert data["__typename"] == "LaunchRunSuccess", data
    return data["run"]["runId"]


def until_runs_done(
    graphql: GraphQL, log: Path, run_ids: list[str] | None = None, timeout: float = 1800
) -> float:
    """Seconds until the runs (every run of the instance when None) have finished, all successful."""
    begin = time.perf_counter()

    def done() -> bool:
        runs = graphql.runs()
        wanted = [run for run in runs if run_ids is None or run["runId"] in run_ids]
        return bool(wanted) and all(run["status"] in DONE for run in wanted)

    wait_for(done, timeout, "the runs to finish", log, interval=0.5)
    failed = [run for run in graphql.runs() if run["status"] != "SUCCESS"]
    assert not failed, failed
    return time.perf_counter() - begin


def backfill_all(graphql: GraphQL, tags: dict[str, str]) -> str:
    """*Materialize all* with partitioned assets in the selection: a backfill of every partition."""
    nodes = graphql("{ assetNodes { assetKey { path } isObservable isExecutable } }")["assetNodes"]
    keys = [
        node["assetKey"]
        for node in nodes
        if node["isExecutable"] and not node["isObservable"] and node["assetKey"]["path"] != ["trivial"]
    ]
    data = graphql(
        "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) { "
        "__typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }",
        p={
            "assetSelection": keys,
            "allPartitions": True,
            "tags": [{"key": key, "value": value} for key, value in tags.items()],
        },
    )["launchPartitionBackfill"]
    assert data["__typename"] == "LaunchBackfillSuccess", data
    return data["backfillId"]


def until_backfill_done(graphql: GraphQL, backfill_id: str, log: Path) -> float:
    begin = time.perf_counter()

    def done() -> bool:
        found = graphql.backfill(backfill_id)
        return found["status"] in FINAL and all(run["status"] in DONE for run in found["runs"])

    wait_for(done, 1800, "the backfill to finish", log, interval=0.5)
    found = graphql.backfill(backfill_id)
    if found["status"] != "COMPLETED_SUCCESS":
        for run in found["runs"]:
            if run["status"] != "SUCCESS":
                messages = [event.get("message") for event in graphql.run_events(run["runId"])]
                print(run["runId"], run["status"], run["tags"], *messages[-8:], sep="\n  ")
        error = graphql(
            "query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill "
            "{ error { message } } } }",
            id=backfill_id,
        )["partitionBackfillOrError"]["error"]
        raise SystemExit(f"the backfill ended {found['status']}: {error}")
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        project, warehouse, home = workspace(root, args.rows, args.days)
        cli = strata_run(project, warehouse)
        print(flush=True)
        print(f"strata run (CLI, process included): {cli:.1f}s")
        with dagster_dev(root, home) as (graphql, log):
            begin = time.perf_counter()
            trivial = launch_run(graphql, "trivial", "__ASSET_JOB", ["trivial"])
            until_runs_done(graphql, log, [trivial])
            fixed = time.perf_counter() - begin
            print(f"fixed cost, a run of one trivial asset (launch to success): {fixed:.1f}s")
            begin = time.perf_counter()
            observe = launch_run(graphql, "shop", "strata_observe_sources", ["orders", "customers"])
            until_runs_done(graphql, log, [observe])
            observed = time.perf_counter() - begin
            print(f"observe sources: {observed:.1f}s")
            begin = time.perf_counter()
            until_backfill_done(graphql, backfill_all(graphql, REASON), log)
            everything = time.perf_counter() - begin
            runs = len(graphql.runs()) - 2
            print(
                f"Materialize all (a backfill of every asset and partition, {runs} runs): {everything:.1f}s"
            )
            target = 2 * cli + fixed
            print(
                f"  ratio to the target 2 x strata run + fixed cost ({target:.1f}s): {everything / target:.2f}"
            )
            nodes = graphql(
                '{ assetNodes(assetKeys: [{path: ["daily_revenue"]}]) { partitionKeysByDimension { partitionKeys } } }'
            )
            days = nodes["assetNodes"][0]["partitionKeysByDimension"][0]["partitionKeys"][:3]
            begin = time.perf_counter()
            three = graphql.launch_backfill(
                "daily_revenue", days, {**REASON, "strata/reason": "bench: 3 days"}
            )
            until_backfill_done(graphql, three, log)
            print(
                f"backfill of 3 daily partitions (launch to done): {time.perf_counter() - begin:.1f}s (target 15 s)"
            )


if __name__ == "__main__":
    main()
