"""Terminal output shared by the commands: errors without tracebacks, tables with rich."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from rich.console import Console

from strata_dagster.errors import StrataError, StrataWarning

P = ParamSpec("P")
R = TypeVar("R")

INTERRUPTED = "interrupted: nothing was published"
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report it

console = Console(highlight=False)
error_console = Console(stderr=True, highlight=False)


def say(text: str, style: str | None = None) -> None:
    """A line of plain text, never wrapped: a summary piped to a file or grep stays one line."""
    console.print(text, markup=False, soft_wrap=True, style=style)


def print_warnings(warnings: tuple[StrataWarning, ...] | list[StrataWarning]) -> None:
    for warning in warnings:
        error_console.print(warning.render(), markup=False, style="yellow", soft_wrap=True)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a StrataError as `error[E0xx]: ...` with its location and exit 1, never a traceback;
    on Ctrl-C say that nothing was published and exit 130."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except StrataError as error:
            error_console.print(error.render(), markup=False, style="red", soft_wrap=True)
            count = len(error.errors)
            if count > 1:
                error_console.print(f"{count} errors", style="red")
            sys.exit(1)
        except KeyboardInterrupt:
            # Every command publishes in one transaction, which the interrupt rolled back.
            error_console.print(INTERRUPTED, markup=False, style="red")
            sys.exit(INTERRUPTED_EXIT)

    return wrapper
