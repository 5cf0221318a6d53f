"""A build that outgrew the warehouse's memory or spill limit, as a coded error naming the setting."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from strata_dagster.backends.base import ResourceLimitExceeded
from strata_dagster.backends.duckdb.limits import raise_hint
from strata_dagster.errors import E_RESOURCE_LIMIT, Location, StrataError


def limit_error(model: str, error: ResourceLimitExceeded, location: Location | None = None) -> StrataError:
    return StrataError(
        E_RESOURCE_LIMIT,
        f"building model `{model}` exceeded the warehouse's limit: {error}",
        location,
        subject=model,
        hint=f"{raise_hint(error.setting)}, or make the model need less: nothing was published",
    )


@contextmanager
def limits_as_errors(model: str, location: Location | None = None) -> Iterator[None]:
    try:
        yield
    except ResourceLimitExceeded as error:
        raise limit_error(model, error, location) from None
