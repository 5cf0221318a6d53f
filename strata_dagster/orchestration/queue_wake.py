"""The run queue's daemon looks for runs to launch as soon as a run's worker exits.

Why: strata's runs share the `duckdb` pool (one run at a time, counted per run), so a run queued
behind another starts only when the queue's daemon next looks after that one has ended: up to its
interval later (half a second with the shipped `dagster.yaml`, a quarter on average). A
*Materialize all* of the example pays it at each of its levels (its next run is queued while the
one before still runs), and so does every run queued behind another (docs/dagster.md, "The Dagster
path's cost"). The daemon's process is also where `StrataRunLauncher` forks the runs' workers and
sees them exit: it sets `RUN_ENDED` then, and the queue's loop, waiting between two iterations,
starts the next one at once. Otherwise the loop waits its interval, as Dagster's does.
"""

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

from dagster._daemon.daemon import SpanMarker
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon
from dagster._utils.error import serializable_error_info_from_exc_info

RUN_ENDED: Final = threading.Event()
STEP_SECONDS: Final = 0.5  # the longest wait between two yields (the daemon's heartbeats follow them)


def wake_on_run_end() -> None:
    """Make this process's run-queue daemon end its wait between iterations when `RUN_ENDED` is
    set (the daemon's process only: the launcher that sets it lives there)."""
    QueuedRunCoordinatorDaemon.core_loop = _core_loop  # type: ignore[method-assign]


def _core_loop(
    self: QueuedRunCoordinatorDaemon, workspace_process_context: Any, shutdown_event: Any
) -> Iterator[Any]:
    """The iterations of Dagster's interval loop (a span around each, an error logged and
    reported, never raised), `interval_seconds` apart unless a run's worker exits meanwhile."""
    while True:
        started = time.monotonic()
        yield SpanMarker.START_SPAN
        try:
            yield from self.run_iteration(workspace_process_context)
        except Exception:
            error = serializable_error_info_from_exc_info(sys.exc_info())
            self._logger.error("Caught error:\n%s", error)
            yield error
        yield SpanMarker.END_SPAN
        while not shutdown_event.is_set():
            left = self.interval_seconds - (time.monotonic() - started)
            if left <= 0:
                break
            if RUN_ENDED.wait(min(left, STEP_SECONDS)):
                RUN_ENDED.clear()
                break
            yield None
        yield None
