"""Fault injection for the crash tests: the process kills itself (SIGKILL) at a named write step.

It sits at the package's top so that any layer's write steps (the serving copy, warehouse/serving.py)
can be crash-tested like the engine's; engine/faults.py names the engine's steps
(docs/architecture.md, Crash safety).
"""

from __future__ import annotations

import os
import signal

KILL_AT_ENV = "STRATA_KILL_AT"


def checkpoint(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
