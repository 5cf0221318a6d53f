"""Refresh periods: the UTC hour or day a build of a `refresh: hourly | daily` model belongs to.

The period is part of such a model's build key, so a build is reused within its period and the
first run of the next period rebuilds it. `always` has no period: the model is never reused.
"""

from __future__ import annotations

import datetime as dt

from strata_dagster.language.definition import Refresh

_BUCKETS = {"hourly": "%Y-%m-%dT%H", "daily": "%Y-%m-%d"}


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def refresh_period(refresh: Refresh | None, at: dt.datetime) -> str | None:
    """The period `at` falls in (a naive `at` is taken as UTC); None for `always` and no refresh."""
    pattern = _BUCKETS.get(refresh or "")
    if pattern is None:
        return None
    if at.tzinfo is not None:
        at = at.astimezone(dt.timezone.utc)
    return f"{refresh}:{at.strftime(pattern)}"


def is_refresh_due(refresh: Refresh | None, last_built: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether a model built at `last_built` is due for a rebuild at `now` by its refresh alone."""
    if refresh is None:
        return False
    if refresh == "always" or last_built is None:
        return True
    return refresh_period(refresh, last_built) != refresh_period(refresh, now)
