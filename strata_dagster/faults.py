"""Fault injection for the crash tests: the process kills itself (SIGKILL) at a named write step.

Set STRATA_KILL_AT to one of the steps below; never set in production. The crash tests run a real
`strata run` subprocess once per step and check the warehouse afterwards. It lives in the warehouse
so that the warehouse's own write steps (the serving copy, warehouse/serving.py) can be
crash-tested like the engine's.
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
# The steps of `strata gc --compact` (warehouse/compaction.py), after each of which a crash
# leaves a complete warehouse file: the old one, or the compacted one.
COMPACT_STEPS = ("compact_copied", "compact_verified", "compact_replaced")


def checkpoint(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
