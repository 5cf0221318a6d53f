"""End to end, as a newcomer uses it: `dagster dev` (webserver and daemon) on 127.0.0.1 with a
temporary DAGSTER_HOME holding the repository's dagster.yaml, the example's definitions.py, and
GraphQL for what the UI shows: a changed source row makes exactly its downstream stale; the
`strata_materialize_stale` sensor materializes them; everything is fresh afterwards. Two runs launched at
once both succeed (the `duckdb` pool)."""

import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from strata_dagster_tests.dagster_support import (
    change_order,
    day_keys,
    execute_assets,
    make_small_shop,
    materialize_everything,
    order_day,
)
from strata_dagster_tests.engine_support import SHOP
from strata_dagster_tests.test_dagster_staleness import paid_order

REPO = Path(__file__).resolve().parents[1]
LOCATION = "shop"
REPOSITORY = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"}
DONE = ("SUCCESS", "FAILURE", "CANCELED")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GraphQL:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/graphql"

    def __call__(self, query: str, **variables):
        request = urllib.request.Request(
            self.url,
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.loads(response.read())
        assert "errors" not in body, body["errors"]
        return body["data"]

    def is_loaded(self) -> bool:
        try:
            data = self(
                "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
                "locationOrLoadError { __typename ... on PythonError { message } } } } } }"
            )
        except (urllib.error.URLError, ConnectionError, OSError):
            return False
        entries = data["workspaceOrError"]["locationEntries"]
        for entry in entries:
            error = entry["locationOrLoadError"] or {}
            assert error.get("__typename") != "PythonError", error.get("message")
        return any(entry["loadStatus"] == "LOADED" and entry["locationOrLoadError"] for entry in entries)

    def launch(self, names: list[str], job: str = "__ASSET_JOB") -> str:
        data = self(
            "mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
            "... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }",
            p={
                "selector": {
                    **REPOSITORY,
                    "jobName": job,
                    "assetSelection": [{"path": [n]} for n in names],
                }
            },
        )["launchRun"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def runs(self) -> list[dict]:
        data = self("{ runsOrError { ... on Runs { results { runId status jobName tags { key value } } } } }")
        runs = data["runsOrError"]["results"]
        for run in runs:
            tags = {tag["key"]: tag["value"] for tag in run.pop("tags")}
            run["start"] = tags.get("dagster/asset_partition_range_start")
            run["end"] = tags.get("dagster/asset_partition_range_end")
        return runs

    def stale(self) -> set[str]:
        """Every stale asset and stale partition, as the UI shows them."""
        nodes = self(
            "{ assetNodes { assetKey { path } isPartitioned isObservable staleStatus "
            "partitionKeysByDimension { partitionKeys } } }"
        )["assetNodes"]
        stale = set()
        for node in nodes:
            name = "/".join(node["assetKey"]["path"])
            if node["isObservable"]:
                continue
            if not node["isPartitioned"]:
                if node["staleStatus"] == "STALE":
                    stale.add(name)
                continue
            keys = node["partitionKeysByDimension"][0]["partitionKeys"]
            statuses = self(
                "query($k: [AssetKeyInput!], $p: [String!]) { assetNodes(assetKeys: $k) "
                "{ staleStatusByPartition(partitions: $p) } }",
                k=[{"path": node["assetKey"]["path"]}],
                p=keys,
            )["assetNodes"][0]["staleStatusByPartition"]
            stale |= {
                f"{name}[{key}]" for key, status in zip(keys, statuses, strict=True) if status == "STALE"
            }
        return stale

    def start_sensor(self, name: str) -> None:
        data = self(
            "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename "
            "... on Sensor { sensorState { status } } ... on PythonError { message } } }",
            s={**REPOSITORY, "sensorName": name},
        )["startSensor"]
        assert data["__typename"] == "Sensor" and data["sensorState"]["status"] == "RUNNING", data


def wait_for(predicate, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what}\n--- dagster dev log ---\n{tail}"
    )


@pytest.fixture
def example(tmp_path):
    """The example's definitions.py over a small warehouse, materialized, with one order changed
    behind Dagster's back (not observed yet), and a DAGSTER_HOME with the repository's dagster.yaml."""
    project, warehouse = make_small_shop(tmp_path)
    shutil.copy(SHOP / "definitions.py", project / "definitions.py")
    shutil.move(warehouse, project / "warehouse.duckdb")
    warehouse = project / "warehouse.duckdb"
    (tmp_path / "workspace.yaml").write_text(
        f"load_from:\n  - python_file:\n      relative_path: shop/definitions.py\n      location_name: {LOCATION}\n"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    defs = runpy.run_path(str(project / "definitions.py"))["defs"]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        materialize_everything(defs, instance)
        assert execute_assets(defs, instance, ["region_summary"]).success
    order = paid_order(warehouse)
    change_order(warehouse, order)
    return tmp_path, home, order_day(warehouse, order)


@pytest.fixture
def dagster_dev(example):
    root, home, _ = example
    port = free_port()
    log = root / "dagster_dev.log"
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1"}
    dagster = Path(sys.executable).parent / "dagster"
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
            cwd=root,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    graphql = GraphQL(port)
    try:
        wait_for(graphql.is_loaded, 120, "the webserver to load the example", log)
        yield graphql, log
    finally:
        # Only what this fixture started: dagster dev's own process group.
        for sig, grace in ((signal.SIGINT, 3), (signal.SIGKILL, 5)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue


def finished(graphql: GraphQL, run_ids: list[str]) -> dict[str, str] | None:
    found = {run["runId"]: run["status"] for run in graphql.runs() if run["runId"] in run_ids}
    return found if len(found) == len(run_ids) and all(status in DONE for status in found.values()) else None


def test_a_changed_source_row_shows_exactly_its_stale_downstream_and_the_sensor_freshens_it(
    example, dagster_dev
):
    _, _, day = example
    graphql, log = dagster_dev
    assert graphql.stale() == set()  # changed, but not observed yet
    # Observe both sources at once, as two runs: both open the warehouse, and both succeed.
    runs = [graphql.launch(["orders"]), graphql.launch(["customers"])]
    statuses = wait_for(lambda: finished(graphql, runs), 120, "the two observation runs", log)
    assert set(statuses.values()) == {"SUCCESS"}, statuses
    # Exactly the models that read `orders` are stale; no partition is.
    assert graphql.stale() == {"stg_orders", "order_status_log", "first_seen_orders"}
    # Materialize them as the UI's "Materialize unsynced" does: their consumers turn stale, and
    # daily_revenue, which reads the unpartitioned stg_orders, in every partition.
    run = graphql.launch(["stg_orders", "order_status_log", "first_seen_orders"], job="strata_unpartitioned")
    assert set(wait_for(lambda: finished(graphql, [run]), 120, "wave 1", log).values()) == {"SUCCESS"}
    assert graphql.stale() == {"orders_enriched", "order_tags", "order_timeline"} | {
        f"daily_revenue[{key}]" for key in day_keys()
    }
    # The stale partitions are what "Materialize unsynced" leaves behind: the sensor takes them,
    # and the one month whose day changed, then region_summary.
    graphql.start_sensor("strata_materialize_stale")

    def settled():
        runs = graphql.runs()
        if any(run["status"] not in DONE for run in runs):
            return None
        return runs if graphql.stale() == set() else None

    runs = wait_for(settled, 240, "the sensor to materialize everything stale", log)
    assert {run["status"] for run in runs} == {"SUCCESS"}
    monthly = [run for run in runs if run["jobName"] == "strata_monthly_revenue_partitions"]
    assert [(run["start"], run["end"]) for run in monthly] == [(day[:8] + "01", day[:8] + "01")]
