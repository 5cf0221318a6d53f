"""Open the warehouse file: one writer at a time, waiting (bounded) for another process's lock."""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from strata_dagster.backends.duckdb.limits import connect_within_limits, exceeded_error
from strata_dagster.backends.duckdb.sql import evaluate_in_utc
from strata_dagster.errors import E_WAREHOUSE, E_WAREHOUSE_BUSY, StrataError, first_line
from strata_dagster.names import WAREHOUSE_ENV as WAREHOUSE_ENV  # read here by settings and the CLI
from strata_dagster.paths import path_problem, shortened
from strata_dagster.sql.render import SNAPSHOT_SCHEMA
from strata_dagster.state.migrations import HISTORY_SCHEMA

LOCK_TIMEOUT_ENV = "STRATA_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 120.0
_LOCK_MARKERS = ("Could not set lock", "Conflicting lock", "lock on file")
# What DuckDB says when a database file's bytes are not what its header promises (a truncated
# copy, a full disk, overwritten bytes): not a query's fault, and no retry helps.
_DAMAGE_MARKERS = ("Could not read enough bytes", "Corrupt database file", "not a valid DuckDB database file")
_held = threading.local()  # this thread's held_open connections: resolved path -> connection


def lock_timeout() -> float:
    return seconds_from_env(LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT, E_WAREHOUSE, example=120)


# The longest wait or grace a setting may give: a year (beyond it, a typo more likely than a wish).
MAX_SECONDS = 365 * 24 * 3600
# A number as an operator types it: ASCII digits (Python's float() also takes `٣`, `1_0`, `1e3`, `inf`).
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def seconds_from_env(name: str, default: float, code: str, *, example: int) -> float:
    """A duration in seconds from the environment variable `name` (`default` when unset): ASCII
    digits, 0 to a year; anything else is `code`, naming the variable."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    seconds = float(raw.strip()) if _SECONDS.fullmatch(raw.strip()) else math.nan
    if not 0 <= seconds <= MAX_SECONDS:  # nan never is
        raise StrataError(
            code,
            f"{name}={raw!r} is not a number of seconds (ASCII digits, 0 to {MAX_SECONDS})",
            hint=f"e.g. {name}={example}, or unset it for {default:.0f}s",
        )
    return seconds


def check_warehouse_path(path: Path, *, is_file: bool = True, setting: str | None = None) -> Path:
    """`path` if it can name a warehouse: a path the OS can use; for a DuckDB file (`is_file`), one
    with a file name that is not a folder, else (Spark's) no file. E020 otherwise; `setting` is the
    variable it came from."""
    given = f"{setting}={str(path)!r}" if setting else f"warehouse `{shortened(path)}`"
    problem = path_problem(path)
    if problem is not None:
        raise StrataError(
            E_WAREHOUSE,
            f"{given} cannot be used: {problem}",
            hint="pass a shorter path to a DuckDB file with --warehouse (or STRATA_WAREHOUSE)",
        )
    if is_file and (path.name in ("", ".", "..") or path.is_dir()):
        raise StrataError(
            E_WAREHOUSE,
            f"{given} is a folder, not a DuckDB file",
            hint=f"name a file in it, e.g. {path / 'warehouse.duckdb'} (--warehouse or STRATA_WAREHOUSE)",
        )
    if not is_file and path.exists() and not path.is_dir():
        raise StrataError(
            E_WAREHOUSE,
            f"{given} is a file, not a Spark warehouse folder",
            hint="name a folder (a new one is created) with --warehouse (or STRATA_WAREHOUSE)",
        )
    return path


@contextmanager
def connect(
    path: Path, *, read_only: bool = False, must_exist: bool = False, timeout: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the warehouse; waits up to `timeout` seconds while another process holds it.

    A path that does not exist becomes a new warehouse, unless the connection is read-only or
    `must_exist` (commands that only read or repoint: a typo must not leave an empty file behind).
    """
    check_warehouse_path(path)
    held = _held_connection(path)
    if held is not None:
        with _reported_interruption(evaluate_in_utc(held.cursor()), path) as con:
            yield con
        return
    wait = lock_timeout() if timeout is None else timeout
    if path.stem in (HISTORY_SCHEMA, SNAPSHOT_SCHEMA):
        # DuckDB names the database after the file: it would shadow the schema of that name.
        raise StrataError(
            E_WAREHOUSE,
            f"a warehouse file cannot be named `{path.name}`",
            hint=f"use another file name; `{HISTORY_SCHEMA}` and `{SNAPSHOT_SCHEMA}` are the warehouse's own schemas",
        )
    if (read_only or must_exist) and not path.exists():
        raise StrataError(
            E_WAREHOUSE,
            f"warehouse `{path}` does not exist",
            hint="check --warehouse (or STRATA_WAREHOUSE), or run `strata run PROJECT` first",
        )
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    delay = 0.05
    while True:
        try:
            con = connect_within_limits(path, read_only=read_only)
            break
        except duckdb.IOException as error:
            if not any(marker in str(error) for marker in _LOCK_MARKERS):
                raise _unreadable(path, error, creates=not (read_only or must_exist)) from None
            if time.monotonic() >= deadline:
                raise StrataError(
                    E_WAREHOUSE_BUSY,
                    f"warehouse `{path}` is in use by another process (waited {wait:.0f}s)",
                    hint=f"wait for the other run to finish, or raise {LOCK_TIMEOUT_ENV} (seconds)",
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except duckdb.OutOfMemoryException as error:  # a memory limit too small to open the file
            raise exceeded_error(error) from None
        except duckdb.Error as error:
            raise _unreadable(path, error, creates=not (read_only or must_exist)) from None
    with _reported_interruption(evaluate_in_utc(con), path) as opened:
        yield opened


@contextmanager
def _reported_interruption(con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """`con`, closed when the block ends; DuckDB's report of a Ctrl-C as the KeyboardInterrupt it
    is, and of a damaged warehouse file as E020."""
    try:
        yield con
    except duckdb.Error as error:
        damaged = damaged_file_error(error, path)
        if damaged is not None:
            raise damaged from None
        raise
    except RuntimeError as error:
        # DuckDB turns Ctrl-C during a query into this, not a duckdb.Error: it is the user's
        # interrupt, and the transaction it cut short rolls back as for any other.
        if is_interruption(error):
            raise KeyboardInterrupt from None
        raise
    finally:
        con.close()


def is_damage(error: BaseException) -> bool:
    """Whether DuckDB failed because a database file's bytes are damaged (not a query's fault)."""
    return isinstance(error, duckdb.IOException) and any(marker in str(error) for marker in _DAMAGE_MARKERS)


def damaged_file_error(error: BaseException, path: Path | None = None) -> StrataError | None:
    """E020 for a read of the warehouse file `path` (or, without it, of any database file) that
    failed on damaged bytes: found while reading, where DuckDB first needs the missing blocks."""
    if not is_damage(error):
        return None
    text = first_line(error)
    if path is not None and not any(
        name in text for name in (str(path), str(path.absolute()), os.path.realpath(path))
    ):
        return None
    return StrataError(E_WAREHOUSE, f"the warehouse file is damaged: {text}", hint=DAMAGED_HINT)


DAMAGED_HINT = (
    "the file was cut short or overwritten (a copy or restore that did not finish, a full disk): "
    "restore it from a backup (a warehouse together with its `.snapshots` folder); readers of the "
    "serving copy still see the last published state, and `strata doctor PROJECT` checks every file"
)


@contextmanager
def held_open(path: Path) -> Iterator[None]:
    """Within the block, this thread's connections to the existing warehouse `path` are new
    connections (`cursor()`) to one database it keeps open, instead of each opening the file.

    Why: opening the file reads its catalog and closing the last connection checkpoints it (tens of
    ms each); a Dagster step (a model's build, its versions, its schema, its companion) opened it
    about ten times. Each connection still has its own transactions; what changes is that this
    process holds the file's lock for the whole block. Nested blocks join the outer one; a path that
    does not exist yet is not held (the first session creates it)."""
    from strata_dagster.backends.choice import current_backend  # choice reads settings only

    if (
        _held_connection(path) is not None
        or not path.exists()
        or not current_backend().capabilities.has_warehouse_file
    ):
        yield
        return
    connections: dict[str, duckdb.DuckDBPyConnection] = _held.__dict__.setdefault("connections", {})
    with connect(path) as con:
        connections[_held_key(path)] = con
        try:
            yield
        finally:
            del connections[_held_key(path)]


def _held_key(path: Path) -> str:
    return os.path.realpath(path)


def _held_connection(path: Path) -> duckdb.DuckDBPyConnection | None:
    connections = getattr(_held, "connections", None)
    return connections.get(_held_key(path)) if connections else None


def is_interruption(error: BaseException) -> bool:
    """Whether DuckDB raised this because the query was interrupted (Ctrl-C)."""
    return isinstance(error, duckdb.InterruptException) or (
        isinstance(error, RuntimeError) and str(error).startswith("Query interrupted")
    )


def _unreadable(path: Path, error: Exception, *, creates: bool) -> StrataError:
    """`creates`: whether this command would have made a new warehouse at a path that did not exist."""
    if creates:
        hint = (
            "pass a DuckDB file with --warehouse (or STRATA_WAREHOUSE); a new path creates an empty warehouse"
        )
    else:
        hint = "pass the warehouse `strata run` built with --warehouse (or STRATA_WAREHOUSE); this command never creates one"
    return StrataError(E_WAREHOUSE, f"cannot open warehouse `{path}`: {first_line(error)}", hint=hint)
