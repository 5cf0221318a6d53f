"""The `strata` console script. Ctrl-C while the command line is still importing ends it with one
line and exit status 130, not a KeyboardInterrupt traceback; so it imports nothing of its own
before it can catch one."""

import gc
import sys
from collections.abc import Callable

INTERRUPTED_EXIT = 130  # 128 + SIGINT (cli.output says the same; importing it is what may be cut)


def run() -> None:
    try:
        from strata_dagster.cli.main import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: nothing was done\n")
        sys.exit(INTERRUPTED_EXIT)
    as_process(main)


def as_process(command: Callable[[], object]) -> None:
    """Run `command` as the whole process: when it ends (click exits), what it made is frozen out of
    the cyclic garbage collection, so that the interpreter's last collection at exit walks none of
    it (a tenth of a no-change run's cost). Nothing is lost: the process is ending, every warehouse
    and file the command opened is closed by then, and atexit handlers still run."""
    try:
        command()
    finally:
        gc.freeze()
