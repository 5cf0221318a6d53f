"""The `strata` console script. Ctrl-C while the command line is still importing ends it with one
line and exit status 130, not a KeyboardInterrupt traceback; so it imports nothing of its own
before it can catch one."""

import sys

INTERRUPTED_EXIT = 130  # 128 + SIGINT (cli.output says the same; importing it is what may be cut)


def run() -> None:
    try:
        from strata_dagster.cli.main import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: nothing was done\n")
        sys.exit(INTERRUPTED_EXIT)
    from strata_dagster.cli.process import as_process

    as_process(main)
