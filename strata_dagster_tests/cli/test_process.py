"""The command line as the whole process (cli/process.py): the command's exit status stands,
atexit handlers run, and what the command made is frozen out of the last garbage collection."""

import subprocess
import sys

AS_PROCESS = """
import atexit, gc, sys
from strata_dagster.cli.process import as_process

made = []
atexit.register(lambda: print("atexit", gc.get_freeze_count() > len(made) > 0, flush=True))

def command():
    made.extend([object()] * 1000)
    sys.exit(int(sys.argv[1]))

as_process(command)
"""


def test_the_exit_status_stands_and_atexit_runs_after_the_freeze():
    for status in (0, 3):
        done = subprocess.run(
            [sys.executable, "-c", AS_PROCESS, str(status)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == status, done.stderr
        assert done.stdout.strip() == "atexit True"
