"""The run queue's daemon looks for queued runs as soon as a run's worker exits (queue_wake.py):
the launcher's watcher sees the forked worker exit and wakes the daemon's wait between iterations,
which otherwise lasts its interval, as Dagster's does."""

import threading
import time

import dagster as dg
import pytest
from dagster._daemon.controller import create_daemon_of_type
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from strata_dagster.orchestration.queue_wake import RUN_ENDED, wake_on_run_end
from strata_dagster.orchestration.run_launcher import StrataRunLauncher
from strata_dagster_tests.dagster_support import REPO, IdleWorkspace, daemon_gap

INTERVAL = 2  # seconds: the queue's interval in these tests


@pytest.fixture
def instance(tmp_path):
    shipped = (REPO / "dagster.yaml").read_text()
    (tmp_path / "dagster.yaml").write_text(
        shipped.replace("dequeue_interval_seconds: 0.5", f"dequeue_interval_seconds: {INTERVAL}")
    )
    original = QueuedRunCoordinatorDaemon.core_loop
    RUN_ENDED.clear()
    try:
        with dg.DagsterInstance.from_config(str(tmp_path)) as found:
            yield found
    finally:
        QueuedRunCoordinatorDaemon.core_loop = original  # type: ignore[method-assign]
        RUN_ENDED.clear()


def _gap(instance: dg.DagsterInstance, *, woken: bool) -> float:
    """Seconds from the end of one iteration of the queue's loop to the start of the next; `woken`:
    a run's worker exits as the first ends."""
    daemon = create_daemon_of_type(QueuedRunCoordinatorDaemon.daemon_type(), instance)
    return daemon_gap(
        lambda shutdown: daemon.core_loop(IdleWorkspace(instance), shutdown),
        RUN_ENDED.set if woken else lambda: None,
    )


def test_the_queue_looks_again_when_a_run_ends_and_waits_its_interval_otherwise(instance):
    wake_on_run_end()
    assert _gap(instance, woken=True) < INTERVAL / 4
    assert not RUN_ENDED.is_set()  # the wake is used once
    assert INTERVAL * 0.9 < _gap(instance, woken=False) < INTERVAL * 3


def test_the_launchers_watcher_wakes_the_queue_when_a_worker_exits(instance):
    launcher = StrataRunLauncher(preload_modules=[])
    launcher.register_instance(instance)
    worker = launcher._fork_server().Process(target=time.sleep, args=(0.5,))
    worker.start()
    launcher._workers["a-run-not-in-the-instance"] = worker
    threading.Thread(target=launcher._watch, daemon=True).start()
    assert RUN_ENDED.wait(30)
    assert worker.exitcode == 0 and not launcher._workers
