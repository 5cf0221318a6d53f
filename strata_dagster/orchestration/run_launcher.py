"""`StrataRunLauncher`: Dagster's default run launcher, with each run's process forked from a
server that has already imported Dagster and strata.

A DuckDB warehouse is one file on one machine, so a strata deployment's runs are local processes.
Dagster's default launcher asks the code location's server to start each run, and that server
starts a new interpreter (multiprocessing's `spawn`, fixed in Dagster 1.13) which imports Dagster,
its SQLite storage and strata before it can load the definitions: about 2.3 s of imports here, paid
by every run and three times by a *Materialize all* of the example (docs/dagster.md, "The Dagster
path's cost"). This launcher starts the same run worker, `dagster api execute_run`'s own code, in
a process forked from a multiprocessing fork server that imported those modules once; the run
loads the code location's definitions from its code pointer as that command does, so a change to
the project's files is seen by the next run.

Runs of a code location it cannot serve that way go to the default launcher: a code server on
another host (not on a local socket or the loopback), one in another Python environment, or any on
a platform without a fork server (Windows). The fork server is started by the daemon when it
starts (the process that launches runs). A termination signals the worker (SIGINT, which Dagster's
run worker handles as a cancellation, as `dagster api execute_run` does).
"""

import filecmp
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import dagster as dg
from dagster._core.launcher.base import LaunchRunContext
from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, ManagedGrpcPythonEnvCodeLocationOrigin
from dagster._serdes import ConfigurableClassData
from typing_extensions import Self

from strata_dagster.orchestration.queue_wake import RUN_ENDED, wake_on_run_end

WATCH_INTERVAL_SECONDS: Final = 0.5  # as often as Dagster's code server looks at its runs' processes
# Run tag: the pid of the forked run worker, which a termination signals.
WORKER_PID_TAG: Final = "strata/run_worker_pid"
# Windows has no fork server: Dagster's default launcher there.
CAN_FORK: Final = "forkserver" in multiprocessing.get_all_start_methods()
LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_PRELOAD: Final = (
    "dagster",
    "dagster._cli.api",
    "dagster._core.storage.event_log",
    "dagster._core.storage.runs",
    "dagster._core.storage.schedules",
    "strata_dagster.orchestration",
    "strata_dagster.orchestration.fork_server_warmup",
)


class StrataRunLauncher(dg.DefaultRunLauncher):
    """Forks each run's worker from a fork server with `preload_modules` imported; runs of a code
    location in another environment go through Dagster's default launcher."""

    def __init__(
        self, inst_data: ConfigurableClassData | None = None, preload_modules: Sequence[str] | None = None
    ):
        super().__init__(inst_data=inst_data)
        self._preload = list(DEFAULT_PRELOAD if preload_modules is None else preload_modules)
        self._context: Any = None
        self._workers: dict[str, Any] = {}
        self._lock = threading.Lock()  # the queue daemon may launch from several threads
        self._watcher: threading.Thread | None = None

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"preload_modules": dg.Field([str], is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> Self:
        return cls(inst_data=inst_data, preload_modules=config_value.get("preload_modules"))

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if not (CAN_FORK and _is_local(run)):
            super().launch_run(context)
            return
        from dagster._grpc.types import ExecuteRunArgs
        from dagster._serdes import serialize_value

        arguments = serialize_value(
            ExecuteRunArgs(
                job_origin=run.job_code_origin, run_id=run.run_id, instance_ref=self._instance.get_ref()
            )
        )
        with self._lock:
            worker = self._fork_server().Process(target=_run_worker, args=(arguments,), daemon=False)
            try:
                worker.start()
            except OSError as error:
                self._instance.report_engine_event(
                    f"Could not fork the run's worker ({error}): launching it with Dagster's default launcher.",
                    dagster_run=run,
                    cls=self.__class__,
                )
                super().launch_run(context)
                return
            self._workers[run.run_id] = worker
            self._run_ids.add(run.run_id)
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="strata-run-workers", daemon=True)
                self._watcher.start()
        self._instance.add_run_tags(run.run_id, {WORKER_PID_TAG: str(worker.pid)})

    def _watch(self) -> None:
        """Fail the run of a worker that exited without ending it (killed for memory, a crash in
        native code), as the code server does for the processes it starts: a run left *Started*
        would also keep the `duckdb` pool's slot, and every later run would wait for it. Then wake
        the run queue's daemon: the pool's slot is free (queue_wake.py)."""
        while True:
            with self._lock:
                sentinels = [worker.sentinel for worker in self._workers.values()]
            if sentinels:  # returns as soon as a worker exits
                multiprocessing.connection.wait(sentinels, timeout=WATCH_INTERVAL_SECONDS)
            else:
                time.sleep(WATCH_INTERVAL_SECONDS)
            with self._lock:
                ended = {run_id: worker for run_id, worker in self._workers.items() if not worker.is_alive()}
                for run_id in ended:
                    del self._workers[run_id]
            for run_id, worker in ended.items():
                self._fail_if_unfinished(run_id, worker.exitcode)
            if ended:
                RUN_ENDED.set()

    def _fail_if_unfinished(self, run_id: str, exit_code: int | None) -> None:
        from dagster._utils import get_run_crash_explanation

        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return
        message = get_run_crash_explanation(
            prefix=f"Run execution process for {run_id}", exit_code=exit_code or 0
        )
        self._instance.report_engine_event(message, dagster_run=run, cls=self.__class__)
        self._instance.report_run_failed(run)

    def _fork_server(self) -> Any:
        if self._context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(self._preload)
            self._context = context
        return self._context

    def start_fork_server(self) -> None:
        """Start the fork server now (it imports `preload_modules`, a few seconds) rather than with
        the first run."""
        from multiprocessing import forkserver

        with self._lock:
            self._fork_server()
            forkserver.ensure_running()

    def terminate(self, run_id: str) -> bool:
        if not self.has_instance:
            return False
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        pid = run.tags.get(WORKER_PID_TAG)
        if pid is None:
            return super().terminate(run_id)
        self._instance.report_run_canceling(run)
        if not _is_run_worker(int(pid)):
            self._instance.report_engine_event(
                f"The run's worker (pid {pid}) is no longer running: nothing to stop.",
                dagster_run=run,
                cls=self.__class__,
            )
            return False
        os.kill(int(pid), signal.SIGINT)
        return True


def start_fork_server_in_the_daemon(instance: dg.DagsterInstance) -> None:
    """In the daemon's process, where runs are launched, start the run launcher's fork server in
    the background, so that the first run after the daemon starts does not wait for its imports.
    Other processes (the webserver, which only terminates runs; a run worker) never start one."""
    if not _is_daemon_process():
        return
    launcher = instance.run_launcher
    if not isinstance(launcher, StrataRunLauncher):
        return
    wake_on_run_end()
    threading.Thread(target=launcher.start_fork_server, name="strata-fork-server", daemon=True).start()


def _is_daemon_process() -> bool:
    """`dagster-daemon run`, or `python -m dagster._daemon run` as `dagster dev` starts it."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    is_daemon = program.name == "dagster-daemon" or (
        program.parent.name == "_daemon" and program.name == "__main__.py"
    )
    return is_daemon and sys.argv[1:2] == ["run"]


def _is_local(run: dg.DagsterRun) -> bool:
    """Whether the run's code location is served on this machine (a location Dagster starts, or a
    code server on a local socket or loopback port, as `dagster dev` and `dg dev` start them) from
    this Python environment."""
    if run.remote_job_origin is None or run.job_code_origin is None:
        return False
    location = run.remote_job_origin.repository_origin.code_location_origin
    if isinstance(location, GrpcServerCodeLocationOrigin):
        if location.socket is None and location.host not in LOOPBACK:
            return False
    elif not isinstance(location, ManagedGrpcPythonEnvCodeLocationOrigin):
        return False
    return _same_environment(run.job_code_origin.repository_origin.executable_path, sys.executable)


def _same_environment(executable: str, ours: str) -> bool:
    """`python` and `python3` of one virtualenv are the same environment (symlinks to one file, or
    copies of it); two virtualenvs over one interpreter are not, although their executables resolve
    to the same file; nor are two interpreters side by side (`python3.11`, `python3.12`)."""
    if os.path.dirname(os.path.abspath(executable)) != os.path.dirname(os.path.abspath(ours)):
        return False
    try:
        return os.path.samefile(executable, ours) or filecmp.cmp(executable, ours, shallow=False)
    except OSError:
        return False


def _is_run_worker(pid: int) -> bool:
    """Whether `pid` is a live process forked by a multiprocessing fork server (its command line is
    the server's), so that a pid reused by another process after the worker died is never signalled."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: only whether it exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return b"multiprocessing.forkserver" in command


def _run_worker(arguments: str) -> None:
    """What `dagster api execute_run ARGUMENTS` does, in a forked process, without that command's
    copy of the run's events: it serializes every event into a list that nothing reads (its
    `send_to_buffer`), about half a millisecond each, and a first load logs more than 800 (a year's
    materializations of the daily model and observations of its input's companion)."""
    from dagster._cli.api import _execute_run_command_body
    from dagster._cli.utils import get_instance_for_cli
    from dagster._grpc.types import ExecuteRunArgs
    from dagster._serdes import deserialize_value
    from dagster._utils.interrupts import capture_interrupts, setup_interrupt_handlers

    setup_interrupt_handlers()
    args = deserialize_value(arguments, ExecuteRunArgs)
    with capture_interrupts(), get_instance_for_cli(instance_ref=args.instance_ref) as instance:
        code = _execute_run_command_body(
            args.run_id,
            instance,
            _events_not_kept,
            set_exit_code_on_failure=bool(args.set_exit_code_on_failure),
        )
    if code != 0:
        sys.exit(code)


def _events_not_kept(event: object) -> None:
    """The run's events are in the instance's event log already; the worker keeps no copy."""
