"""The command line as the whole process (the `strata` script, `python -m strata_dagster.cli.main`)."""

from __future__ import annotations

import gc
from collections.abc import Callable


def as_process(command: Callable[[], object]) -> None:
    """Run `command` as the whole process: when it ends (click exits), what it made is frozen out of
    the cyclic garbage collection, so that the interpreter's last collection at exit walks none of
    it (a twentieth of a no-change run's cost). Nothing is lost: the process is ending, every
    warehouse and file the command opened is closed by then, and atexit handlers still run."""
    try:
        command()
    finally:
        gc.freeze()
