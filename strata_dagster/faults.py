"""Fault injection for the crash tests: the process kills itself (SIGKILL) at a named write step.

It sits at the package's top so that any layer's write steps (the serving copy, backends/duckdb/serving.py)
can be crash-tested like the engine's; WRITE_STEPS and COMPACT_STEPS name the run's and gc's steps
(docs/architecture.md, Crash safety).
"""

from __future__ import annotations

import os
import signal

KILL_AT_ENV = "STRATA_KILL_AT"
# The steps of `strata run`, in order: a crash after any of them leaves the last published state.
WRITE_STEPS = (
    "migrated",
    "transaction_started",
    "snapshot_created",
    "pins_checked",
    "views_pointed",
    "history_written",
    "committed",
)
# The steps of `strata gc --compact` (backends/duckdb/compaction.py), after each of which a crash
# leaves a complete warehouse file: the old one, or the compacted one.
COMPACT_STEPS = ("compact_copied", "compact_verified", "compact_replaced")


def checkpoint(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
