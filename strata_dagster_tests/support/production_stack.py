"""The stack teams deploy, on this machine: a PostgreSQL server (Debian's `postgresql`), a stock
`DagsterInstance` on it (or on Dagster's default SQLite storage) configured by deploy/dagster.yaml,
and `dagster-webserver`, `dagster-daemon` and a gRPC code server (`dagster api grpc`) as separate
processes on 127.0.0.1, the default run launcher and the queued run coordinator, the `duckdb` pool's
limit set with `dagster instance concurrency set duckdb 1`. Nothing of strata's own dagster.yaml."""

from __future__ import annotations

import copy
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest
import yaml

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster_tests.support.dagster_support import REPO, GraphQL, free_port, wait_for

DEPLOY = REPO / "deploy"
SHOP = REPO / "examples" / "shop"
HOST = "127.0.0.1"
LOCATION = "shop"  # the code location's name, as in the repository's workspace.yaml
REPOSITORY_NAME = "__repository__"  # a code location of one `Definitions`
POOL = "duckdb"
# The example's orders over 40 days (40 daily partitions, 2 monthly ones) rather than `strata
# sample-data`'s year: on a stock instance each partition's events are written one by one.
EXAMPLE_DAYS = 40
POSTGRES_USER = "postgres"  # the database role; also the OS user the server runs as under root
# The environment deploy/dagster.yaml reads the PostgreSQL connection from.
POSTGRES_ENV = (
    "DAGSTER_POSTGRES_HOST",
    "DAGSTER_POSTGRES_PORT",
    "DAGSTER_POSTGRES_USER",
    "DAGSTER_POSTGRES_PASSWORD",
    "DAGSTER_POSTGRES_DB",
)
# For the tests, shorter intervals than production's and threaded sensors: Dagster's documented settings.
TEST_INSTANCE = {
    "run_queue": {"dequeue_interval_seconds": 1},
    "run_monitoring": {"poll_interval_seconds": 2, "free_slots_after_run_end_seconds": 2},
    "sensors": {"use_threads": True, "num_workers": 2},
}
# Seconds the stopped stack's processes get to exit before SIGKILL: webserver and daemon take about
# 2 s; a code server that started run workers waited on them past any grace (15 s a test here).
STOP_GRACE = 5
MISSING_POSTGRES = (
    "PostgreSQL's server is missing (no /usr/lib/postgresql/*/bin/initdb): install Debian's "
    "`postgresql` package (`apt-get install -y postgresql`; .ci/run does)"
)
REQUIRE_ENV = "STRATA_REQUIRE_PRODUCTION"  # .ci/run sets it: there a missing server fails the tier
SKIPPED = "production tier skipped: "  # conftest sums these skips up in one line


def require_postgres() -> Path:
    """PostgreSQL's binaries. Without them the tests that need the server are skipped, saying how
    to install it, unless STRATA_REQUIRE_PRODUCTION=1 (CI) makes that a failure."""
    found = postgres_bin()
    if found is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{MISSING_POSTGRES} ({REQUIRE_ENV}=1 requires the tier)")
        pytest.skip(f"{SKIPPED}{MISSING_POSTGRES}")
    return found


def run_checked(command: list[str], **options) -> subprocess.CompletedProcess:
    """`command` to its end; its output in the error when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, **options)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done


# -- PostgreSQL ---------------------------------------------------------------------------------
def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian lays each major version out apart)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Postgres:
    """A running PostgreSQL server on 127.0.0.1 (trust authentication: it listens on loopback only)."""

    bin: Path
    port: int
    root: Path

    def create_database(self, name: str, template: str | None = None) -> None:
        """A new database `name`, empty or a copy of database `template` (PostgreSQL copies its files)."""
        copy_of = ["-T", template] if template else []
        run_checked(
            [
                str(self.bin / "createdb"),
                "-h",
                HOST,
                "-p",
                str(self.port),
                "-U",
                POSTGRES_USER,
                *copy_of,
                name,
            ]
        )

    def environment(self, database: str) -> dict[str, str]:
        """What deploy/dagster.yaml reads: the connection to `database`."""
        values = (HOST, str(self.port), POSTGRES_USER, "unused-with-trust", database)
        return dict(zip(POSTGRES_ENV, values, strict=True))


def _as_server_user() -> tuple[list[str], pwd.struct_passwd | None]:
    """The prefix that runs a command as the server's user: PostgreSQL refuses to run as root."""
    if os.geteuid() != 0:
        return [], None
    try:
        user = pwd.getpwnam(POSTGRES_USER)
    except KeyError:
        raise RuntimeError(
            f"running as root and there is no `{POSTGRES_USER}` user for PostgreSQL's server to run as: "
            "Debian's `postgresql` package creates it (apt-get install -y postgresql)"
        ) from None
    return ["runuser", "-u", POSTGRES_USER, "--"], user


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """A fresh PostgreSQL cluster in a temporary folder on a free port, stopped and removed on exit."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError(MISSING_POSTGRES)
    prefix, user = _as_server_user()
    # Not under pytest's tmp_path: its parents are private to this user, and the server's user must
    # reach its folder.
    root = Path(tempfile.mkdtemp(prefix="strata-postgres-"))
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    data = root / "data"
    started = False
    try:
        run_checked(
            [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", POSTGRES_USER, "--auth=trust"]
            + ["--no-locale", "-E", "UTF8", "--no-sync"]
        )
        for _attempt in range(3):  # another process may take the free port before the server binds it
            port = free_port()
            options = (
                f"-c listen_addresses={HOST} -p {port} -k {root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            start = subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log")]
                + ["-w", "-t", "60", "-o", options, "start"],
                capture_output=True,
                text=True,
            )
            if start.returncode == 0:
                started = True
                break
        if not started:
            log = (root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"PostgreSQL did not start: {start.stdout}{start.stderr}\n{log}")
        yield Postgres(bin_dir, port, root)
    finally:
        if started:
            stopped = subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
            )
            if stopped.returncode != 0:
                _kill_postmaster(data)
        shutil.rmtree(root, ignore_errors=True)


def _kill_postmaster(data: Path) -> None:
    pid_file = data / "postmaster.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


# -- the instance -------------------------------------------------------------------------------
def instance_config(postgres: bool, overrides: Mapping = TEST_INSTANCE) -> dict:
    """deploy/dagster.yaml as this stack runs it: with its `storage:` section (PostgreSQL, the
    connection read from the environment) or without it (`postgres` false: Dagster's default
    SQLite storage in DAGSTER_HOME), `overrides` merged in."""
    config = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    if not postgres:
        del config["storage"]
    return _merged(config, overrides)


def _merged(base: Mapping, overrides: Mapping) -> dict:
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# -- the processes ------------------------------------------------------------------------------
def executable(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def code_server_command(host: str, port: int, python_file: str, working_directory: str) -> list[str]:
    return [
        executable("dagster"), "api", "grpc", "--host", host, "--port", str(port),
        "--python-file", python_file, "--working-directory", working_directory,
        "--location-name", LOCATION,
    ]  # fmt: skip


def webserver_command(host: str, port: int, workspace: str) -> list[str]:
    return [executable("dagster-webserver"), "--host", host, "--port", str(port), "--workspace", workspace]


def daemon_command(workspace: str) -> list[str]:
    return [executable("dagster-daemon"), "run", "--workspace", workspace]


def workspace_yaml(host: str, port: int) -> str:
    """A workspace of one code location served by a gRPC code server (what webserver and daemon load)."""
    return yaml.safe_dump(
        {"load_from": [{"grpc_server": {"host": host, "port": port, "location_name": LOCATION}}]},
        sort_keys=False,
    )


class StackGraphQL(GraphQL):
    """What the journeys read of the webserver's GraphQL API, besides what the UI's tests read."""

    def sensor_named(self, suffix: str) -> dict:
        """The one sensor of the code location whose name ends with `suffix` (names may gain a
        project's prefix): its name, interval and state."""
        sensors = self(
            "query($r: RepositorySelector!) { repositoryOrError(repositorySelector: $r) { ... on Repository "
            "{ sensors { name minIntervalSeconds sensorState { status ticks(limit: 1) { status timestamp } } } } } }",
            r={"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY_NAME},
        )["repositoryOrError"]["sensors"]
        (sensor,) = [sensor for sensor in sensors if sensor["name"].endswith(suffix)]
        return sensor

    def start_sensor_named(self, name: str) -> None:
        data = self(
            "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename "
            "... on Sensor { sensorState { status } } ... on PythonError { message } } }",
            s={"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY_NAME, "sensorName": name},
        )["startSensor"]
        assert data["__typename"] == "Sensor" and data["sensorState"]["status"] == "RUNNING", data

    def downstream(self, name: str) -> set[str]:
        """Every asset that reads `name`, directly or not (the asset graph as the UI draws it)."""
        nodes = self("{ assetNodes { assetKey { path } dependedByKeys { path } } }")["assetNodes"]
        children = {
            "/".join(node["assetKey"]["path"]): {"/".join(key["path"]) for key in node["dependedByKeys"]}
            for node in nodes
        }
        found, todo = set(), [name]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found

    def materialized_since(self, name: str, millis: int) -> list[str | None]:
        """The partitions (None: the asset) of every materialization of `name` after `millis`."""
        events = self(
            "query($k: AssetKeyInput!, $t: String) { assetOrError(assetKey: $k) { ... on Asset { "
            "assetMaterializations(afterTimestampMillis: $t) { partition } } } }",
            k={"path": [name]},
            t=str(millis),
        )["assetOrError"]
        return [event["partition"] for event in (events or {}).get("assetMaterializations", [])]

    def run_records(self) -> list[dict]:
        """Every run: id, status, tags (a dict), the asset keys it selected and its times."""
        data = self(
            "{ runsOrError { ... on Runs { results { runId status jobName creationTime startTime endTime "
            "tags { key value } assetSelection { path } } } } }"
        )["runsOrError"]["results"]
        for run in data:
            run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
            run["assets"] = {"/".join(key["path"]) for key in run.pop("assetSelection") or []}
        return data

    def run_log(self, run_id: str) -> list[dict]:
        """The run's events: GraphQL type, message and metadata (label -> text or int)."""
        events = self(
            "query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { "
            "__typename ... on MessageEvent { message } ... on EngineEvent { metadataEntries { label "
            "... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue } } } } } } }",
            id=run_id,
        )["logsForRun"]["events"]
        for event in events:
            event["metadata"] = {
                entry["label"]: entry.get("text", entry.get("intValue"))
                for entry in event.pop("metadataEntries", None) or []
            }
        return events

    def busy_worker(self, run_id: str) -> int | None:
        """The pid of the run's worker process once one of its steps has started (Dagster's engine
        event names the pid when the worker starts)."""
        events = self.run_log(run_id)
        if not any(event["__typename"] == "ExecutionStepStartEvent" for event in events):
            return None
        pids = [int(event["metadata"]["pid"]) for event in events if "pid" in event["metadata"]]
        return pids[0] if pids else None


@dataclass
class Stack:
    """The running stack: its GraphQL API, its folders and its processes by name."""

    root: Path
    home: Path
    project: Path
    warehouse: Path
    graphql: GraphQL
    environment: dict[str, str]
    storage: str
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        """`command` as a process of its own, in a process group of its own (stopped as a whole)."""
        with self.log(name).open("a") as output:
            process = subprocess.Popen(
                command,
                cwd=self.root,
                env=self.environment,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[name] = process
        return process

    def start_daemon(self) -> None:
        self.start("daemon", daemon_command("workspace.yaml"))

    def kill(self, name: str) -> None:
        """SIGKILL the process `name` and its process group, as a crash of its host would."""
        process = self.processes.pop(name)
        _signal_group(process, signal.SIGKILL)
        process.wait(30)

    def stop(self) -> None:
        """Every process asked to stop at once (SIGTERM), then waited for; SIGKILL past a grace
        shared by all of them (nothing of the stack is read once it is stopped)."""
        processes = [self.processes.pop(name) for name in list(self.processes)]
        for process in processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for process in processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process, signal.SIGKILL)  # the group's leftovers (a run worker, say)
            process.wait(10)

    def strata(self, *arguments: str) -> subprocess.CompletedProcess:
        """The strata CLI on the stack's project and warehouse."""
        return subprocess.run(
            [executable("strata"), *arguments, str(self.project), "--warehouse", str(self.warehouse)],
            capture_output=True,
            text=True,
            env=self.environment,
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{self.log(name).read_text(errors='replace')[-3000:]}"
            for name in ("code_server", "webserver", "daemon")
            if self.log(name).exists()
        )


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def copy_example(root: Path, rows: int, days: int = EXAMPLE_DAYS) -> tuple[Path, Path]:
    """The shop example copied into `root/shop` (its Dagster definitions.py too) over a warehouse of
    `strata sample-data`'s tables: `rows` orders over `days` days from 2025-01-01. Returns
    (project, warehouse)."""
    project = root / "shop"
    shutil.copytree(
        SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "dagster.yaml", "__pycache__", ".snapshots")
    )
    warehouse = project / "warehouse.duckdb"
    write_sample_data(warehouse, rows, days=days)
    return project, warehouse


def view_pointers(warehouse: Path) -> dict[str, str]:
    """What each live view of branch `main` shows (its definition names the snapshot), read-only."""
    deadline = time.monotonic() + 60
    while True:
        try:
            connection = duckdb.connect(str(warehouse), read_only=True)
            break
        except duckdb.IOException:  # a writer holds the file for an instant
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    try:
        rows = connection.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal"
        ).fetchall()
    finally:
        connection.close()
    return dict(rows)


def _port_is_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((HOST, port)) == 0


def prepare_instance(root: Path, postgres: Postgres | None, database: str) -> tuple[Path, dict[str, str]]:
    """DAGSTER_HOME with the stack's dagster.yaml (its PostgreSQL database created first) and the
    environment every process gets; the pool's limit set the documented way, which also creates the
    instance's tables before any server starts. Returns (home, environment)."""
    home = root / "dagster_home"
    home.mkdir()
    if postgres is not None:
        postgres.create_database(database)
    config = instance_config(postgres is not None)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    environment = instance_environment(home, postgres, database)
    run_checked(
        [executable("dagster"), "instance", "concurrency", "set", POOL, "1"], env=environment, cwd=root
    )
    return home, environment


def instance_environment(home: Path, postgres: Postgres | None, database: str) -> dict[str, str]:
    """The environment every process of the stack gets: DAGSTER_HOME and the database's connection."""
    storage = postgres.environment(database) if postgres is not None else {}
    return {
        **os.environ,
        **storage,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }


@contextmanager
def production_stack(
    root: Path,
    project: Path,
    warehouse: Path,
    home: Path,
    environment: dict[str, str],
    storage: str,
    definitions: Path | None = None,
) -> Iterator[Stack]:
    """The code server (`definitions`, default the project's definitions.py), then the webserver
    and the daemon, until the webserver shows the code location loaded; every process stopped on
    exit."""
    code_port, web_port = free_port(), free_port()
    (root / "workspace.yaml").write_text(workspace_yaml(HOST, code_port))
    stack = Stack(root, home, project, warehouse, StackGraphQL(web_port), environment, storage)
    with ExitStack() as cleanup:
        cleanup.callback(stack.stop)
        code_server = stack.start(
            "code_server",
            code_server_command(
                HOST, code_port, str(definitions or project / "definitions.py"), str(project)
            ),
        )
        wait_for(
            lambda: _port_is_open(code_port) or code_server.poll() is not None,
            180,
            "the code server to load the definitions",
            stack.log("code_server"),
            interval=0.5,
        )
        assert code_server.poll() is None, stack.logs()
        stack.start("webserver", webserver_command(HOST, web_port, "workspace.yaml"))
        stack.start_daemon()
        wait_for(
            stack.graphql.is_loaded, 180, "the webserver to load the code location", stack.log("webserver")
        )
        yield stack
