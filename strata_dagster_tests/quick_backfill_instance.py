"""The Dagster instance of the tests that follow a Dagster backfill under `dagster dev`: the shipped
`StrataInstance`, whose daemon waits BACKFILL_INTERVAL_SECONDS between two iterations of its
backfill loop instead of Dagster's fixed 30 s.

Why: Dagster requests a backfill's runs level by level, one iteration of the backfill daemon apart,
and the loop's sleep is a constant of Dagster 1.13 (`dagster/_daemon/controller.py`
`DEFAULT_DAEMON_INTERVAL_SECONDS`, which no setting of dagster.yaml changes; docs/dagster.md, "The
Dagster path's cost"). A test that follows the example's first *Materialize all* to its end waited
about two minutes of those sleeps. Only the wait between iterations changes: every iteration is
Dagster's own, in the real daemon, on the real instance and storage. The benches and the README keep
the shipped dagster.yaml, whose waits are what users have.
"""

from __future__ import annotations

from typing import Any

import dagster._daemon.controller as daemon_controller

from strata_dagster.orchestration.event_storage import StrataInstance

BACKFILL_INTERVAL_SECONDS = 3
SHIPPED_INSTANCE_CLASS = (
    "instance_class:\n  module: strata_dagster.orchestration.event_storage\n  class: StrataInstance\n"
)


class QuickBackfillInstance(StrataInstance):
    """`StrataInstance`; in the daemon's process, its backfill loop sleeps BACKFILL_INTERVAL_SECONDS.

    The loop reads the constant when it starts, after the daemon's process built its instance."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS = BACKFILL_INTERVAL_SECONDS


def with_quick_backfills(shipped_yaml: str) -> str:
    """The shipped dagster.yaml with `QuickBackfillInstance` as its instance class."""
    assert SHIPPED_INSTANCE_CLASS in shipped_yaml, "dagster.yaml no longer names StrataInstance as shipped"
    return shipped_yaml.replace(
        SHIPPED_INSTANCE_CLASS,
        f"instance_class:\n  module: {__name__}\n  class: {QuickBackfillInstance.__name__}\n",
    )
