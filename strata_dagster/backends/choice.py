"""Which backend a process builds on: DuckDB (embedded, the default) or Spark, and what each does differently.

Every backend opens the same `Session` interface (backends/base.py); the engine above it never
knows which one it talks to, and asks a backend's `Capabilities` where they differ. The choice is
made once per process, by the CLI's `--backend`, `build_definitions(backend=...)`, or
`STRATA_BACKEND` (`--engine`, `engine=` and `STRATA_ENGINE` are its former names, still read), the
way a database driver is chosen. Backends
are opened by module path (backends/opening.py), so this module imports neither (only
`strata_dagster.backends.spark` imports pyspark).
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.metadata
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from strata_dagster.errors import E_BACKEND, StrataError
from strata_dagster.names import BACKEND_ENV, BACKEND_NAMES, ENGINE_ENV, SPARK_REMOTE_ENV

DEFAULT_BACKEND: Final = "duckdb"


@dataclass(frozen=True)
class Capabilities:
    """What a backend does differently, known before a session opens (backends' registry,
    backends/choice.py). The engine asks these, never the backend's name."""

    # The warehouse is one file (DuckDB): a path that must be a file, `gc --compact`, file sizes,
    # `strata doctor`, a connection a process may hold open, a new file created on first open.
    has_warehouse_file: bool
    # Readers read a serving copy of the live views, never the writer's warehouse (DuckDB's lock
    # keeps them out of it); without one they query the live views themselves.
    has_serving_copy: bool
    # Business-versioned file sources are listed in a thread while the writer's lock is awaited,
    # with their listings cached beside the warehouse file.
    lists_sources_while_opening: bool
    # A partitioned `group … aggregate` over a model is maintained from its upstream's delta
    # segment (engine/builds/aggregate_builder.py) rather than recomputed per partition.
    maintains_aggregates_from_delta: bool
    # A row-wise model over a source with a key but no change column is rebuilt by the buckets of
    # that key whose rows changed (engine/builds/key_buckets.py; the bucket is the backend's hash).
    slices_by_key_buckets: bool
    # How long a superseded snapshot outlives its last publication by default (`strata gc`):
    # none where readers read a serving copy; longer where they query the snapshots themselves.
    gc_grace: dt.timedelta
    # The warehouse a project uses when none is given.
    default_warehouse_name: str


DUCKDB_CAPABILITIES: Final = Capabilities(
    has_warehouse_file=True,
    has_serving_copy=True,
    lists_sources_while_opening=True,
    maintains_aggregates_from_delta=True,
    slices_by_key_buckets=True,
    gc_grace=dt.timedelta(0),
    default_warehouse_name="warehouse.duckdb",
)
SPARK_CAPABILITIES: Final = Capabilities(
    has_warehouse_file=False,
    has_serving_copy=False,
    lists_sources_while_opening=False,
    maintains_aggregates_from_delta=False,
    # Kept to today's behaviour until a Spark test covers it: such a model is built in full.
    slices_by_key_buckets=False,
    # Readers query the snapshots themselves: a dropped one fails a query still running.
    gc_grace=dt.timedelta(hours=1),
    default_warehouse_name="spark-warehouse",
)
_CAPABILITIES: Final[dict[str, Capabilities]] = {"duckdb": DUCKDB_CAPABILITIES, "spark": SPARK_CAPABILITIES}


@dataclass(frozen=True)
class BackendChoice:
    """The backend, and where a Spark backend finds its cluster (`sc://host:port`; None: a local
    Spark over the warehouse directory)."""

    name: str = DEFAULT_BACKEND
    spark_remote: str | None = None

    @property
    def is_duckdb(self) -> bool:
        return self.name == "duckdb"

    @property
    def capabilities(self) -> Capabilities:
        """What this backend does differently (backends/base.py), known before a session opens."""
        return capabilities_of(self.name)

    @property
    def default_warehouse_name(self) -> str:
        """The warehouse a project uses when none is given: a DuckDB file, or a Spark warehouse folder."""
        return self.capabilities.default_warehouse_name


def capabilities_of(name: str) -> Capabilities:
    """What the backend named `name` (one of BACKEND_NAMES) does differently."""
    return _CAPABILITIES[name]


def _backend_in_environment() -> tuple[str | None, str]:
    """The backend the environment names, and the variable naming it: STRATA_BACKEND, else its
    former name STRATA_ENGINE."""
    for variable in (BACKEND_ENV, ENGINE_ENV):
        value = os.environ.get(variable)
        if value:
            return value, variable
    return None, BACKEND_ENV


def backend_choice(name: str | None = None, spark_remote: str | None = None) -> BackendChoice:
    """A backend by name (default: $STRATA_BACKEND, else $STRATA_ENGINE, else duckdb); E071 for an
    unknown one."""
    from_environment, variable = _backend_in_environment()
    chosen = (name or from_environment or DEFAULT_BACKEND).strip().lower()
    if chosen not in BACKEND_NAMES:
        raise StrataError(
            E_BACKEND,
            f"`{chosen}` is not a backend strata runs on",
            hint=f"use one of: {', '.join(BACKEND_NAMES)} (--backend or {variable})",
        )
    remote = spark_remote or os.environ.get(SPARK_REMOTE_ENV) or None
    if remote is not None and chosen != "spark":
        remote = None  # a Spark Connect address set for other commands does not apply to DuckDB
    if remote is not None and not remote.startswith("sc://"):
        raise StrataError(
            E_BACKEND,
            f"`{remote}` is not a Spark Connect address",
            hint=f"write it as sc://host:port (--spark-remote or {SPARK_REMOTE_ENV})",
        )
    return BackendChoice(chosen, remote)


_chosen: BackendChoice | None = None


def current_backend() -> BackendChoice:
    """The backend this process builds on: the one chosen, else the environment's."""
    return _chosen if _chosen is not None else backend_choice()


def chosen_backend() -> BackendChoice | None:
    """The backend chosen for this process, None when the environment decides."""
    return _chosen


def choose_backend(choice: BackendChoice | None) -> None:
    """Make `choice` this process's backend (None: back to the environment's)."""
    global _chosen
    _chosen = choice


@contextmanager
def using_backend(choice: BackendChoice) -> Iterator[BackendChoice]:
    """`choice` as the backend for the duration of the block (tests, tools)."""
    before = _chosen
    choose_backend(choice)
    try:
        yield choice
    finally:
        choose_backend(before)


@functools.lru_cache(maxsize=4)
def _version_of(name: str) -> str:
    package = "duckdb" if name == "duckdb" else "pyspark"
    try:
        return f"{name}-{importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{name}-unknown"


def backend_version(choice: BackendChoice | None = None) -> str:
    """The backend and its version, part of every fingerprint: content hashes of two backends are
    computed differently and are never compared (`duckdb-2.0.1`, `spark-4.3.0`)."""
    return _version_of((choice or current_backend()).name)


def backend_label(choice: BackendChoice | None = None) -> str:
    """The backend's name as messages say it: DuckDB, Spark."""
    return {"duckdb": "DuckDB", "spark": "Spark"}[(choice or current_backend()).name]
