"""Terminal output shared by the commands: errors without tracebacks, tables with rich."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from strata_dagster.errors import StrataError, StrataWarning

if TYPE_CHECKING:
    from rich.console import Console

P = ParamSpec("P")
R = TypeVar("R")

INTERRUPTED = "interrupted: nothing was published"
INTERRUPTED_EARLY = "interrupted: nothing was done"
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report it
_BEFORE_COMMAND = "strata_before_command"


class LazyConsole:
    """A rich Console made when it first prints something only rich can print: a plain line (no
    markup, style or wrapping) is written as it is, so that a command printing only such lines (a
    run that finds nothing to do, `--help`) does not import rich."""

    def __init__(self, *, stderr: bool = False, **options: Any) -> None:
        self._stderr = stderr
        # No emoji codes either way: what strata prints is data (`:memory:` stays as written).
        self._options = {"stderr": stderr, "emoji": False, **options}
        self._console: Console | None = None

    def print(self, *objects: Any, **options: Any) -> None:
        if self._console is None and _is_plain_line(objects, options):
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(f"{objects[0]}\n")
            stream.flush()
            return
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        self._console.print(*objects, **options)


def _is_plain_line(objects: tuple[Any, ...], options: dict[str, Any]) -> bool:
    """Whether rich would print `objects` as their text and a newline: one string without markup,
    style or wrapping, and nothing rich rewrites in it (tabs, control characters)."""
    if len(objects) != 1 or type(objects[0]) is not str:
        return False
    if options.get("markup", True) or not options.get("soft_wrap") or options.get("style") is not None:
        return False
    if set(options) - {"markup", "soft_wrap", "style"}:
        return False
    return all(char >= " " or char == "\n" for char in objects[0]) and "\x7f" not in objects[0]


console = LazyConsole(highlight=False)
error_console = LazyConsole(stderr=True, highlight=False)


def say(text: str, style: str | None = None) -> None:
    """A line of plain text, never wrapped: a summary piped to a file or grep stays one line."""
    console.print(text, markup=False, soft_wrap=True, style=style)


def print_warnings(warnings: tuple[StrataWarning, ...] | list[StrataWarning]) -> None:
    for warning in warnings:
        error_console.print(warning.render(), markup=False, style="yellow", soft_wrap=True)


def before_each_command(prepare: Callable[[], None]) -> None:
    """Have `prepare` (a group's checks) run once the sub-command has read its own arguments, as its
    body starts (`reports_errors` runs it): `strata CMD --help` neither waits for it nor fails on it."""
    click.get_current_context().meta[_BEFORE_COMMAND] = prepare


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a StrataError as `error[E0xx]: ...` with its location and exit 1, never a traceback;
    on Ctrl-C say that nothing was published and exit 130."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        interrupted = INTERRUPTED_EARLY
        try:
            context = click.get_current_context(silent=True)
            prepare = context.meta.pop(_BEFORE_COMMAND, None) if context is not None else None
            if prepare is not None:
                prepare()
            interrupted = INTERRUPTED
            return command(*args, **kwargs)
        except StrataError as error:
            error_console.print(error.render(), markup=False, style="red", soft_wrap=True)
            count = len(error.errors)
            if count > 1:
                error_console.print(f"{count} errors", style="red")
            sys.exit(1)
        except KeyboardInterrupt:
            # Every command publishes in one transaction, which the interrupt rolled back.
            error_console.print(interrupted, markup=False, style="red")
            sys.exit(INTERRUPTED_EXIT)

    return wrapper
