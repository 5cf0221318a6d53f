"""Shared set-up for Dagster tests: a small shop, runs of asset selections, stale sets, and
`dagster dev` (webserver and daemon) on 127.0.0.1 driven through GraphQL."""

import datetime as dt
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run
from dagster._core.loader import LoadingContextForTest

from strata_dagster import build_definitions
from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.opening import open_session
from strata_dagster.orchestration.constants import VERSIONS_FOLLOW_KEY
from strata_dagster.state.history import Entry
from strata_dagster_tests.support.engine_support import SHOP, UNPARTITIONED_MODELS, execute
from strata_dagster_tests.support.paths import REPO

START = dt.date(2025, 1, 1)
DAYS = 40  # 2025-01-01 .. 2025-02-09: 40 daily partitions, 2 monthly ones
SOURCES = ("orders", "customers")


def make_small_shop(tmp_path: Path, rows: int = 2_000, days: int = DAYS) -> tuple[Path, Path]:
    project = tmp_path / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "*.md", "*.py", "__pycache__"))
    warehouse = tmp_path / "warehouse.duckdb"
    write_sample_data(warehouse, rows, days=days, start=START)
    return project, warehouse


def day_keys(days: int = DAYS) -> list[str]:
    return [(START + dt.timedelta(days=index)).isoformat() for index in range(days)]


def execute_assets(defs: dg.Definitions, instance: dg.DagsterInstance, names, *, partitions=None, tags=None):
    """Run (materialize or observe) the named assets in one in-process run; `partitions` is a key
    or a (first, last) range."""
    keys = [dg.AssetKey(name) for name in names]
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    run_tags = dict(tags or {})
    partition_key = None
    if isinstance(partitions, tuple):
        run_tags.update(_range_tags(partitions))
    else:
        partition_key = partitions
    result = job.execute_in_process(
        instance=instance,
        asset_selection=keys,
        partition_key=partition_key,
        tags=run_tags,
        raise_on_error=False,
    )
    return result


def _range_tags(partitions: tuple[str, str]) -> dict[str, str]:
    return {
        "dagster/asset_partition_range_start": partitions[0],
        "dagster/asset_partition_range_end": partitions[1],
    }


def launch_in_process(
    defs: dg.Definitions, instance: dg.DagsterInstance, names, *, job=None, partitions=None, tags=None
) -> dg.DagsterRun:
    """Run the named assets as a run worker does, through the definitions' own executor
    (`execute_in_process` swaps in Dagster's), in this process; `job` defaults to the implicit
    asset job and `partitions` is a (first, last) range. Returns the finished run."""
    keys = [dg.AssetKey(name) for name in names]
    job_def = defs.resolve_job_def(job) if job else defs.resolve_implicit_job_def_def_for_assets(keys)
    run_tags = {**(tags or {}), **(_range_tags(partitions) if partitions else {})}
    run = instance.create_run_for_job(job_def, tags=run_tags, asset_selection=frozenset(keys))
    execute_run(InMemoryJob(job_def), run, instance)
    finished = instance.get_run_by_id(run.run_id)
    assert finished is not None
    return finished


def run_events(instance: dg.DagsterInstance, run_id: str, event_type: dg.DagsterEventType) -> list:
    return [
        record.event_log_entry for record in instance.get_records_for_run(run_id, of_type=event_type).records
    ]


def warehouse_digest(warehouse: Path) -> str:
    """The bytes of the warehouse (and its write-ahead log): equal digests, nothing written."""
    digest = hashlib.sha256()
    for path in (warehouse, warehouse.with_name(warehouse.name + ".wal")):
        digest.update(path.read_bytes() if path.exists() else b"-")
    return digest.hexdigest()


def history_entries(warehouse: Path) -> list[Entry]:
    """The strata history, read without writing (empty before the first run)."""
    with open_session(warehouse, read_only=True) as session:
        return session.history.entries() if session.has_history() else []


def observe_sources(defs, instance, names=SOURCES):
    result = execute_assets(defs, instance, names)
    assert result.success
    return result


def resolver(defs: dg.Definitions, instance: dg.DagsterInstance) -> CachingStaleStatusResolver:
    return CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))


def stale_set(defs: dg.Definitions, instance: dg.DagsterInstance) -> set[str]:
    """Every stale asset (`name`) and stale partition (`name[key]`), as Dagster's UI would show them."""
    status = resolver(defs, instance)
    graph = defs.resolve_asset_graph()
    stale = set()
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        name = key.to_user_string()
        if node.partitions_def is None:
            if status.get_status(key) == StaleStatus.STALE:
                stale.add(name)
            continue
        for partition in node.partitions_def.get_partition_keys():
            if status.get_status(key, partition) == StaleStatus.STALE:
                stale.add(f"{name}[{partition}]")
    return stale


def status_of(defs, instance, name, partition=None) -> StaleStatus:
    return resolver(defs, instance).get_status(dg.AssetKey(name), partition)


def materialize_everything(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    """Observe the sources, then materialize every model: each partitioned one in a ranged run."""
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, UNPARTITIONED_MODELS).success
    daily, monthly = partition_ranges(defs)
    assert execute_assets(defs, instance, ["daily_revenue"], partitions=daily).success
    assert execute_assets(defs, instance, ["monthly_revenue"], partitions=monthly).success


def materialized_shop(tmp_path: Path) -> tuple[Path, Path, dg.Definitions, dg.DagsterInstance]:
    """The small shop, its definitions and an ephemeral instance in which everything is materialized:
    (project, warehouse, defs, instance)."""
    project, warehouse = make_small_shop(tmp_path)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    materialize_everything(defs, instance)
    return project, warehouse, defs, instance


def partition_ranges(defs):
    graph = defs.resolve_asset_graph()
    ranges = []
    for name in ("daily_revenue", "monthly_revenue"):
        keys = graph.get(dg.AssetKey(name)).partitions_def.get_partition_keys()
        ranges.append((keys[0], keys[-1]))
    return ranges


def change_order(warehouse: Path, order_id: int, amount: str = "12345.67") -> None:
    """An update of one order as its writer makes it: a new amount, stamped after every earlier change."""
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = CAST(? AS DECIMAL(12,2)), "
        "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND WHERE order_id = ?",
        params=[amount, order_id],
    )


def order_day(warehouse: Path, order_id: int) -> str:
    return str(
        execute(
            warehouse, "SELECT CAST(order_ts AS DATE) FROM raw.orders WHERE order_id = ?", params=[order_id]
        )[0][0]
    )


def is_content_event(materialization: dg.AssetMaterialization) -> bool:
    """Not a partitioned model's output event: its partition's own event (the content version) follows."""
    return VERSIONS_FOLLOW_KEY not in materialization.metadata


def materializations(result, name):
    """The run's materializations of asset `name` that carry its content versions."""
    return [
        event.event_specific_data.materialization
        for event in result.get_asset_materialization_events()
        if event.event_specific_data.materialization.asset_key == dg.AssetKey(name)
        and is_content_event(event.event_specific_data.materialization)
    ]


def content_materializations(instance: dg.DagsterInstance, run_id: str) -> list:
    """The run's materialization entries that carry their content versions (see `materializations`)."""
    return [
        entry
        for entry in run_events(instance, run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
        if is_content_event(entry.asset_materialization)
    ]


# -- the webserver's GraphQL, in process -------------------------------------------------------------
@contextmanager
def graphql_in_process(project: Path, warehouse: Path, instance: dg.DagsterInstance, folder: Path):
    """The GraphQL API the UI reads, over a code location that loads the project's definitions in
    this process (no webserver, no gRPC server): yields `query(text, **variables) -> data`."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    module = folder / "ui_definitions.py"
    module.write_text(
        "from strata_dagster import build_definitions\n"
        f"defs = build_definitions({str(project)!r}, warehouse={str(warehouse)!r})\n"
    )
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(python_file=str(module), attribute="defs", working_directory=str(folder)),
        location_name=LOCATION,
    )
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as process:

        def query(text: str, **variables):
            result = execute_dagster_graphql(process.create_request_context(), text, variables)
            assert not result.errors, result.errors
            return result.data

        yield query


# -- dagster dev ------------------------------------------------------------------------------------
REPO = REPO
LOCATION = "shop"
REPOSITORY = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"}
DONE = ("SUCCESS", "FAILURE", "CANCELED")


def example_workspace(tmp_path: Path, days: int = DAYS) -> tuple[Path, Path, Path]:
    """The example's definitions.py over a small warehouse (sources only, `days` days of orders), a
    workspace.yaml naming it, and a DAGSTER_HOME with the repository's dagster.yaml. Returns
    (project, warehouse, home)."""
    project, warehouse = make_small_shop(tmp_path, days=days)
    shutil.copy(SHOP / "definitions.py", project / "definitions.py")
    shutil.move(warehouse, project / "warehouse.duckdb")
    (tmp_path / "workspace.yaml").write_text(
        f"load_from:\n  - python_file:\n      relative_path: shop/definitions.py\n      location_name: {LOCATION}\n"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return project, project / "warehouse.duckdb", home


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

    def launch(self, names: list[str], job: str = "__ASSET_JOB", location: str = LOCATION) -> str:
        """A run of the assets `names` (of the code location `location`), as *Materialize* launches it."""
        data = self(
            "mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
            "... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }",
            p={
                "selector": {
                    **REPOSITORY,
                    "repositoryLocationName": location,
                    "jobName": job,
                    "assetSelection": [{"path": [n]} for n in names],
                }
            },
        )["launchRun"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def launch_job(self, job: str, tags: dict[str, str] | None = None, config: dict | None = None) -> str:
        """A run of a job as its Launchpad launches it: its tags and run config, no asset selection."""
        params: dict = {
            "selector": {**REPOSITORY, "jobName": job},
            "executionMetadata": {
                "tags": [{"key": key, "value": value} for key, value in (tags or {}).items()]
            },
        }
        if config is not None:
            params["runConfigData"] = config
        data = self(
            "mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
            "... on LaunchRunSuccess { run { runId } } ... on PythonError { message } "
            "... on RunConfigValidationInvalid { errors { message } } } }",
            p=params,
        )["launchRun"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def run_times(self) -> dict[str, dict]:
        """Every run's job, status, tags and its creation, start and end (epoch seconds)."""
        data = self(
            "{ runsOrError { ... on Runs { results { runId jobName status creationTime startTime "
            "endTime tags { key value } } } } }"
        )
        runs = {}
        for run in data["runsOrError"]["results"]:
            run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
            runs[run["runId"]] = run
        return runs

    def launch_backfill(self, name: str, partitions: list[str], tags: dict[str, str] | None = None) -> str:
        """A backfill of `partitions` of asset `name`, as the UI's partition dialog launches it."""
        data = self(
            "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) { "
            "__typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }",
            p={
                "assetSelection": [{"path": [name]}],
                "partitionNames": partitions,
                "tags": [{"key": key, "value": value} for key, value in (tags or {}).items()],
            },
        )["launchPartitionBackfill"]
        assert data["__typename"] == "LaunchBackfillSuccess", data
        return data["backfillId"]

    def backfill(self, backfill_id: str) -> dict:
        """The backfill's status and its runs (id, status, tags)."""
        data = self(
            "query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename "
            "... on PartitionBackfill { status runs { runId status tags { key value } } } } }",
            id=backfill_id,
        )["partitionBackfillOrError"]
        assert data["__typename"] == "PartitionBackfill", data
        for run in data["runs"]:
            run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
        return data

    def run_events(self, run_id: str) -> list[dict]:
        """Every event of the run: its GraphQL type, message and, for failures, the error."""
        return self(
            "query($id: ID!) { logsForRun(runId: $id) { __typename ... on EventConnection { events { "
            "__typename ... on MessageEvent { message } "
            "... on RunFailureEvent { error { message } } "
            "... on RunCanceledEvent { error { message } } } } } }",
            id=run_id,
        )["logsForRun"]["events"]

    def materializations(self, name: str, partitions: list[str]) -> list[dict]:
        """The materializations of the partitions that carry their content versions: partition, run
        id and text metadata."""
        events = self(
            "query($k: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $k) { ... on Asset { "
            "assetMaterializations(partitions: $p) { partition runId metadataEntries { label "
            "... on TextMetadataEntry { text } } } } } }",
            k={"path": [name]},
            p=partitions,
        )["assetOrError"]["assetMaterializations"]
        for event in events:
            event["metadata"] = {entry["label"]: entry.get("text") for entry in event.pop("metadataEntries")}
        # Those that carry the content versions (a partitioned model's output events precede them).
        return [event for event in events if VERSIONS_FOLLOW_KEY not in event["metadata"]]

    def partition_stats(self, name: str) -> dict:
        """What the asset's partitions bar shows: numPartitions, numMaterialized, numFailed,
        numMaterializing."""
        return self(
            "query($k: [AssetKeyInput!]) { assetNodes(assetKeys: $k) { partitionStats { "
            "numPartitions numMaterialized numFailed numMaterializing } } }",
            k=[{"path": [name]}],
        )["assetNodes"][0]["partitionStats"]

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


def wait_for(predicate, timeout: float, what: str, log: Path, interval: float = 2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what}\n--- dagster dev log ---\n{tail}"
    )


def finished(graphql: GraphQL, run_ids: list[str]) -> dict[str, str] | None:
    found = {run["runId"]: run["status"] for run in graphql.runs() if run["runId"] in run_ids}
    return found if len(found) == len(run_ids) and all(status in DONE for status in found.values()) else None


@contextmanager
def dagster_dev(root: Path, home: Path) -> Iterator[tuple[GraphQL, Path]]:
    """`dagster dev` in `root` (its workspace.yaml) with DAGSTER_HOME `home`, on 127.0.0.1, until
    the code location is loaded; stopped (its own process group only) on exit."""
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


class IdleWorkspace:  # what a daemon's iteration reads of its workspace when it has nothing to do
    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance


def daemon_gap(start_loop, between=lambda: None) -> float:
    """Seconds between the end of one iteration of a daemon's loop, `start_loop(shutdown)`, with
    nothing to do, and the start of the next, in this process; `between` runs as the first ends."""
    from dagster._daemon.daemon import SpanMarker

    shutdown = threading.Event()
    loop = start_loop(shutdown)
    try:
        while next(loop) is not SpanMarker.END_SPAN:
            pass
        ended = time.monotonic()
        between()
        while next(loop) is not SpanMarker.START_SPAN:
            pass
        return time.monotonic() - ended
    finally:
        shutdown.set()
        loop.close()
