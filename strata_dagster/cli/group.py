"""The `strata` command group: whatever click meets while it reads the command line (an unknown
option, a value out of range, a StrataError from an option's check, Ctrl-C) is reported as the
commands report their own errors: `error[E0xx]` with a hint, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from strata_dagster.cli.output import INTERRUPTED_EARLY, INTERRUPTED_EXIT, error_console
from strata_dagster.errors import E_USAGE, StrataError

USAGE_EXIT = 2  # as click and POSIX utilities exit on a command line they cannot read


class UsageMistake(click.UsageError):
    """A usage error of click's, shown as strata's E074."""

    exit_code = USAGE_EXIT

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message(), error.ctx)

    def show(self, file: Any = None) -> None:
        command = self.ctx.command_path if self.ctx is not None else "strata"
        report(StrataError(E_USAGE, self.format_message(), hint=f"`{command} --help` lists what it takes"))


def report(error: StrataError) -> None:
    error_console.print(error.render(), markup=False, style="red", soft_wrap=True)


class StrataGroup(click.Group):
    """A click group whose parsing errors, and its sub-commands', are coded (see the module)."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with _reported():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _reported():
            return super().invoke(ctx)


@contextmanager
def _reported() -> Iterator[None]:
    """Click's usage errors as E074 (exit 2); a StrataError raised while the command line is read
    printed with its code (exit 1); Ctrl-C that no command handled as one line (exit 130)."""
    try:
        yield
    except UsageMistake:
        raise
    except click.UsageError as error:
        if error.ctx is not None and error.format_message() == error.ctx.get_help():
            raise  # `strata` or `strata branch` alone: the help, as click shows it
        raise UsageMistake(error) from None
    except StrataError as error:
        report(error)
        sys.exit(1)
    except KeyboardInterrupt:
        error_console.print(INTERRUPTED_EARLY, markup=False, style="red")
        sys.exit(INTERRUPTED_EXIT)
