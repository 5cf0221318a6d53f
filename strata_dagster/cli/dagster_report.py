"""The command line's report to Dagster after a command that changed live views: only when
`DAGSTER_HOME` is set (and `STRATA_DAGSTER_REPORT` is not `0`); Dagster is imported then only
(orchestration.instance_report), so the CLI runs without it."""

from __future__ import annotations

import os
from pathlib import Path

from strata_dagster.cli.output import print_warnings, say
from strata_dagster.errors import StrataWarning

HOME_ENV = "DAGSTER_HOME"
REPORT_ENV = "STRATA_DAGSTER_REPORT"  # `0`: never report


def reporting_home() -> str | None:
    """The Dagster instance folder to report to, or None (not configured, or turned off)."""
    home = os.environ.get(HOME_ENV, "").strip()
    if not home or os.environ.get(REPORT_ENV, "").strip() == "0":
        return None
    return home


def report_to_dagster(project: Path, warehouse: Path, entry: int | None) -> None:
    """Report the live state after `entry` to $DAGSTER_HOME's instance, and say so in one line."""
    home = reporting_home()
    if home is None or entry is None:
        return
    from strata_dagster.orchestration.instance_report import report_entry

    found = report_entry(project, warehouse, entry, home)
    if found is None:
        return
    if isinstance(found, StrataWarning):
        print_warnings([found])
        return
    say(f"reported to Dagster ({HOME_ENV}={found.home}): {found.events} events")
