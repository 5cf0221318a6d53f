"""Refresh periods in Dagster: a model with `refresh:` (or a volatile model, `always`) is due for a
rebuild once its period has passed since its last materialization, whatever its inputs.

Dagster's own stale status only sees code and input data versions; the stale sensor and the
automation condition add the models this says are due.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import cast

import dagster as dg

from strata_dagster.fingerprint.refresh import is_refresh_due
from strata_dagster.language.definition import REFRESHES, Refresh
from strata_dagster.orchestration import constants as c

_now = time.time  # the clock of refresh decisions (tests move it)


def refresh_of(node) -> Refresh | None:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """The refresh an asset node declares through its `strata/refresh` tag."""
    value = (node.tags or {}).get(c.REFRESH_TAG)
    return cast(Refresh, value) if value in REFRESHES else None


def is_due(instance: dg.DagsterInstance, key: dg.AssetKey, refresh: Refresh | None) -> bool:
    """Whether `refresh` asks for a rebuild now: always, never materialized, or last materialized
    in an earlier UTC hour or day (any partition's latest materialization counts)."""
    if refresh is None:
        return False
    event = instance.get_latest_materialization_event(key)
    last = None if event is None else dt.datetime.fromtimestamp(event.timestamp, dt.timezone.utc)
    return is_refresh_due(refresh, last, dt.datetime.fromtimestamp(_now(), dt.timezone.utc))
