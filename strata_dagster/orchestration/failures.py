"""A user's mistake met in a Dagster step (a model DuckDB refuses, a source that cannot be read, a
warehouse another process holds too long) ends the step as a `dg.Failure`: the strata message, with
its code, file:line:col and hint, is the failure's description and metadata. Raised as itself, it
reached the UI as an error of the IO manager or op, the engine's stack trace under it.

A mistake found while Dagster loads the definitions (a typo in a `.strata` file, a warehouse that
is not there) cannot be a step's failure: Dagster shows the code location's load error with its
stack. That stack stops at `build_definitions` (`raises_cleanly`): the user's own lines above it,
strata's message, and not the parser's or the engine's frames below it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import dagster as dg

from strata_dagster.errors import StrataError
from strata_dagster.orchestration import constants as c

Function = TypeVar("Function", bound=Callable[..., Any])


def as_failure(error: StrataError) -> dg.Failure:
    metadata = {c.ERROR_CODE_KEY: error.code, c.HINT_KEY: error.hint or ""}
    if error.location is not None:
        metadata[c.LOCATION_KEY] = str(error.location)
    return dg.Failure(description=error.render(), metadata=metadata)


@contextmanager
def failing_cleanly() -> Iterator[None]:
    try:
        yield
    except StrataError as error:
        raise as_failure(error) from None


def fails_cleanly(function: Function) -> Function:
    """`function` (an op's, an observation's or a check's compute function, a generator or not)
    with its StrataErrors raised as `dg.Failure`. Dagster reads its parameters through the wrapper."""
    if inspect.isgeneratorfunction(function):

        @functools.wraps(function)
        def generating(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with failing_cleanly():
                yield from function(*args, **kwargs)

        return generating  # type: ignore[return-value]  # the wrapper keeps the wrapped function's signature

    @functools.wraps(function)
    def returning(*args: Any, **kwargs: Any) -> Any:
        with failing_cleanly():
            return function(*args, **kwargs)

    return returning  # type: ignore[return-value]  # the wrapper keeps the wrapped function's signature


def raises_cleanly(function: Function) -> Function:
    """`function`, called where Dagster loads a code location, with a StrataError raised again
    from here without the frames below (nor the errors it was raised from): its message already
    says where the mistake is and what to do."""

    @functools.wraps(function)
    def loading(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except StrataError as error:
            raise error.with_traceback(None) from None

    return loading  # type: ignore[return-value]  # the wrapper keeps the wrapped function's signature
