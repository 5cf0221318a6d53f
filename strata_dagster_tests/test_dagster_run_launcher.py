"""`StrataRunLauncher`, the shipped dagster.yaml's run launcher, under a real `dagster dev` on
127.0.0.1: a run of a local code location runs in a process forked from the fork server (its
parent is that server, its pid in the run's tags), a worker killed mid-run fails its run, a
termination from the UI cancels such a run, and a code location in another Python environment goes
through Dagster's default launcher."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.code_pointer import FileCodePointer
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

from strata_dagster.orchestration.run_launcher import (
    DEFAULT_PRELOAD,
    WORKER_PID_TAG,
    _is_daemon_process,
    _is_local,
    _same_environment,
)
from strata_dagster_tests.dagster_support import REPO, GraphQL, dagster_dev, wait_for

pytestmark = pytest.mark.xdist_group("dagster_dev")

LOCATION = """
import gc
import os
import signal
import time
from pathlib import Path

import dagster as dg


def _parent() -> str:
    command = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    return "fork server" if b"multiprocessing.forkserver" in command else command.decode(errors="replace")


@dg.asset
def quick() -> dg.MaterializeResult:
    return dg.MaterializeResult(
        metadata={"pid": os.getpid(), "parent": _parent(), "frozen": gc.get_freeze_count()}
    )


@dg.asset
def slow() -> None:
    Path(os.environ["STARTED_FLAG"] + "_" + str(os.getpid())).touch()
    for _ in range(600):
        time.sleep(0.2)


@dg.asset
def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would


@dg.asset
def fails() -> None:
    raise ValueError("a mistake in the asset's code")


defs = dg.Definitions(assets=[quick, slow, crash, fails], executor=dg.in_process_executor)
"""


def _other_environment(root: Path) -> Path:
    """A virtualenv of its own (its own `bin/python`) that imports this one's packages."""
    import site
    import venv

    folder = root / "other_env"
    venv.EnvBuilder(with_pip=False).create(folder)
    packages = next((folder / "lib").glob("python*/site-packages"))
    (packages / "ours.pth").write_text("\n".join(site.getsitepackages() + [str(REPO)]) + "\n")
    return folder / "bin" / "python"


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every process: its parent's pid and its command line."""
    found = {}
    for folder in Path("/proc").iterdir():
        try:
            parent = int((folder / "stat").read_text().rsplit(")", 1)[1].split()[1])
            found[int(folder.name)] = (parent, (folder / "cmdline").read_bytes())
        except (ValueError, OSError, IndexError):
            continue
    return found


def _daemons_fork_servers() -> list[int]:
    processes = _processes()
    return [
        pid
        for pid, (parent, command) in processes.items()
        if b"multiprocessing.forkserver" in command
        and b"dagster._daemon" in processes.get(parent, (0, b""))[1]
    ]


def _loaded_locations(graphql: GraphQL) -> int:
    entries = graphql(
        "{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { __typename } } } } }"
    )["workspaceOrError"]["locationEntries"]
    return sum(entry["locationOrLoadError"]["__typename"] == "RepositoryLocation" for entry in entries)


def _status(graphql: GraphQL, run_id: str) -> str:
    return next(run["status"] for run in graphql.runs() if run["runId"] == run_id)


def _until(graphql: GraphQL, log: Path, run_id: str, statuses: tuple[str, ...]) -> str:
    wait_for(lambda: _status(graphql, run_id) in statuses, 120, f"run {run_id} to end", log, interval=0.5)
    return _status(graphql, run_id)


def test_runs_are_forked_a_killed_worker_fails_its_run_the_ui_cancels_one_another_environment_uses_dagsters(
    tmp_path, monkeypatch
):
    (tmp_path / "local.py").write_text(LOCATION)
    (tmp_path / "elsewhere.py").write_text(LOCATION)
    other = _other_environment(tmp_path)
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n"
        "  - python_file:\n      relative_path: local.py\n      location_name: local\n"
        f"  - python_file:\n      relative_path: elsewhere.py\n      location_name: elsewhere\n"
        f"      executable_path: {other}\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    flag = tmp_path / "started"
    monkeypatch.setenv("STARTED_FLAG", str(flag))
    with dagster_dev(tmp_path, home) as (graphql, log):
        wait_for(lambda: _loaded_locations(graphql) == 2, 120, "both code locations to load", log)
        # The daemon starts its fork server before any run is launched.
        wait_for(lambda: _daemons_fork_servers(), 60, "the daemon's fork server", log, interval=0.5)
        forked = graphql.launch(["quick"], location="local")
        assert _until(graphql, log, forked, ("SUCCESS", "FAILURE")) == "SUCCESS"
        default = graphql.launch(["quick"], location="elsewhere")
        assert _until(graphql, log, default, ("SUCCESS", "FAILURE")) == "SUCCESS"

        crashed = graphql.launch(["crash"], location="local")
        assert _until(graphql, log, crashed, ("SUCCESS", "FAILURE", "CANCELED")) == "FAILURE"
        failed = graphql.launch(["fails"], location="local")
        assert _until(graphql, log, failed, ("SUCCESS", "FAILURE", "CANCELED")) == "FAILURE"

        slow = graphql.launch(["slow"], location="local")
        wait_for(lambda: any(tmp_path.glob("started_*")), 60, "the slow asset to start", log, interval=0.2)
        worker = int(next(tmp_path.glob("started_*")).name.split("_")[1])
        data = graphql("mutation($id: String!) { terminateRun(runId: $id) { __typename } }", id=slow)[
            "terminateRun"
        ]
        assert data["__typename"] == "TerminateRunSuccess", data
        assert _until(graphql, log, slow, ("CANCELED", "FAILURE", "SUCCESS")) == "CANCELED"
        wait_for(
            lambda: not Path(f"/proc/{worker}").exists(),
            30,
            "the cancelled worker to exit",
            log,
            interval=0.2,
        )

    with dg.DagsterInstance.from_config(str(home)) as instance:
        quick = {
            run_id: instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
            .records[0]
            .event_log_entry.asset_materialization.metadata
            for run_id in (forked, default)
        }
        tags = {run_id: instance.get_run_by_id(run_id).tags for run_id in (forked, default, slow)}
        crash_messages = [entry.message for entry in instance.all_logs(crashed)]
        failure = [entry.dagster_event for entry in instance.all_logs(failed) if entry.is_dagster_event]

    # The local location's run: a child of the fork server, whose pid the run's tags hold.
    assert quick[forked]["parent"].value == "fork server"
    assert tags[forked][WORKER_PID_TAG] == str(quick[forked]["pid"].value)
    assert tags[slow][WORKER_PID_TAG] == str(worker)
    # What the fork server imported is frozen (its collector never walks it in a run);
    # Dagster's own launcher's worker freezes nothing.
    assert quick[forked]["frozen"].value > 100_000 and quick[default]["frozen"].value == 0
    # A worker killed mid-run: its run fails, saying how (as Dagster's code server says it).
    assert any("was terminated by signal 9 (SIGKILL)" in message for message in crash_messages), (
        crash_messages
    )
    # An asset that raises: its step fails with the error and the run ends FAILURE, through the
    # run's events alone (the worker keeps no copy of them).
    step_failure = next(event for event in failure if event.event_type == dg.DagsterEventType.STEP_FAILURE)
    assert "a mistake in the asset's code" in step_failure.step_failure_data.error.to_string()
    assert failure[-1].event_type in (dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.ENGINE_EVENT)
    # The other environment's run: Dagster's launcher, a child of that location's code server.
    assert WORKER_PID_TAG not in tags[default]
    assert ".dagster/grpc_info" in tags[default]
    assert "dagster" in quick[default]["parent"].value and quick[default]["parent"].value != "fork server"


def _run(location, executable: str) -> dg.DagsterRun:
    """A run as the webserver creates it: the code location as the webserver reaches it, the
    repository as its code server describes it (its interpreter, its code pointer)."""
    repository = RepositoryPythonOrigin(executable, FileCodePointer("local.py", "defs", "/work"), None)
    return dg.DagsterRun(
        job_name="__ASSET_JOB",
        remote_job_origin=RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), "__ASSET_JOB"),
        job_code_origin=JobPythonOrigin("__ASSET_JOB", repository),
    )


@pytest.mark.parametrize(
    ("location", "executable", "forked"),
    [
        (
            GrpcServerCodeLocationOrigin(host="localhost", socket="/tmp/dagster.sock", location_name="l"),
            sys.executable,
            True,
        ),
        (GrpcServerCodeLocationOrigin(host="127.0.0.1", port=4266, location_name="l"), sys.executable, True),
        (
            GrpcServerCodeLocationOrigin(host="warehouse-box", port=4266, location_name="l"),
            sys.executable,
            False,
        ),
        # Another virtualenv over the same interpreter: its executable resolves to the same file,
        # and it is still another environment (its own site-packages).
        (
            GrpcServerCodeLocationOrigin(host="localhost", socket="/tmp/dagster.sock", location_name="l"),
            "/elsewhere/bin/python",
            False,
        ),
    ],
    ids=["local socket", "loopback port", "another host", "another environment"],
)
def test_only_a_code_location_served_on_this_machine_from_this_environment_is_forked(
    location, executable, forked
):
    assert _is_local(_run(location, executable)) is forked


@pytest.mark.parametrize(
    ("argv", "daemon"),
    [
        (
            ["/venv/lib/python3.11/site-packages/dagster/_daemon/__main__.py", "run", "--log-level", "info"],
            True,
        ),
        (["/venv/bin/dagster-daemon", "run"], True),
        (["/venv/bin/dagster-daemon", "liveness-check"], False),
        (["/venv/bin/dagster-webserver", "-h", "127.0.0.1"], False),
        (["/venv/bin/dagster", "api", "execute_run"], False),
        ([], False),
    ],
)
def test_the_fork_server_starts_early_only_in_the_daemons_process(monkeypatch, argv, daemon):
    monkeypatch.setattr(sys, "argv", argv)
    assert _is_daemon_process() is daemon


def test_python_and_python3_of_one_virtualenv_are_one_environment(tmp_path):
    python = Path(_other_environment(tmp_path))
    assert _same_environment(str(python.with_name("python3")), str(python))
    assert not _same_environment(str(python), sys.executable)


def test_the_fork_server_builds_the_grammar_before_any_run(tmp_path):
    """Its preload, imported as multiprocessing's fork server imports it, leaves the strata grammar's
    parser built: each forked run's first parse of a project finds it."""
    script = (
        "import importlib, sys\n"
        f"for name in {list(DEFAULT_PRELOAD)!r}:\n"
        "    importlib.import_module(name)\n"
        "from strata_dagster.language import parser\n"
        "print(parser._grammar.cache_info().currsize)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert found.stdout.strip() == "1", found.stderr
