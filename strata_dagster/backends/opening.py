"""Opening a warehouse on the backend this process builds on (backends/choice.py chooses it):
the engine, the CLI and the Dagster layer open sessions here and never name a backend."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from strata_dagster.backends.base import Opener, Session
from strata_dagster.backends.choice import BackendChoice, current_backend
from strata_dagster.backends.duckdb.opening import open_served, source_schemas_of
from strata_dagster.errors import E_BACKEND, StrataError
from strata_dagster.language.definition import Project

# Backend -> "module:function" that opens its sessions, imported only when the backend is chosen.
_OPENERS: Final[dict[str, str]] = {
    "duckdb": "strata_dagster.backends.duckdb.opening:open_duckdb_session",
    "spark": "strata_dagster.backends.spark.opening:open_spark_session",
}


def backend_opener(choice: BackendChoice) -> Opener:
    """The function that opens sessions of the backend `choice` (imported on first use)."""
    return _opener(choice.name)


@functools.lru_cache(maxsize=4)
def _opener(name: str) -> Opener:
    module_name, _, function = _OPENERS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith(("pyspark", "py4j", "grpc", "google")):
            raise  # a module of strata's own: a bug to show, not an installation to ask for
        raise StrataError(
            E_BACKEND,
            f"the {name} backend is not installed ({error.name or error})",
            hint="pip install 'strata_dagster[spark]' (pyspark) and make sure Java 17 is on the PATH",
        ) from None
    opener: Opener = getattr(module, function)
    return opener


@contextmanager
def open_session(
    path: Path, *, read_only: bool = False, must_exist: bool = False, timeout: float | None = None
) -> Iterator[Session]:
    """Open the warehouse (waiting up to `timeout` seconds, default $STRATA_LOCK_TIMEOUT, for
    another process's lock), migrated unless read-only.

    With `must_exist`, a missing warehouse is an error (E020) instead of a new, empty one. `path`
    is the chosen backend's warehouse: a DuckDB file, or a Spark warehouse directory.
    """
    choice = current_backend()
    opener = backend_opener(choice)
    with opener(path, choice, read_only=read_only, must_exist=must_exist, timeout=timeout) as session:
        yield session


@contextmanager
def open_live_session(path: Path) -> Iterator[Session]:
    """A session that reads the live views as readers see them, never locking out a writer: the
    serving copy where the backend keeps one (a warehouse published before it existed gets one
    first), else the live views themselves (Spark never locks readers out)."""
    if not current_backend().capabilities.has_serving_copy:
        with open_session(path, read_only=True) as session:
            yield session
        return
    with open_served(path) as session:
        yield session


def read_source_schemas(warehouse: Path, project: Project) -> dict[str, tuple[tuple[str, str], ...]]:
    """(column, type) of every source that can be read now, without writing anything.

    A warehouse that does not exist is not created: file sources are then described from an
    in-memory DuckDB, and table sources are simply not known yet.
    """
    if current_backend().capabilities.has_warehouse_file:
        return source_schemas_of(warehouse, project)
    if warehouse.exists():
        with open_session(warehouse, read_only=True) as session:
            return session.source_schemas(project, {})
    return source_schemas_of(None, project)  # describe file sources in memory
