"""Which engine a process builds on: DuckDB (embedded, the default) or Spark.

Every engine opens the same `Session` interface (backends/base.py); the engine code above it
never knows which one it talks to, and asks a backend's `Capabilities` where they differ. The choice is made once per process, by the CLI's `--engine`,
`build_definitions(engine=...)`, or `STRATA_ENGINE`, the way a database driver is chosen. Engines
are found by module path, so this module never imports them (only `strata_dagster.backends.spark`
imports pyspark).
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import importlib.metadata
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from strata_dagster.backends.base import Capabilities, Opener
from strata_dagster.errors import E_ENGINE, StrataError
from strata_dagster.names import ENGINE_ENV, ENGINE_NAMES, SPARK_REMOTE_ENV

DEFAULT_ENGINE: Final = "duckdb"

# Engine -> "module:function" that opens its sessions, imported only when the engine is chosen.
_OPENERS: Final[dict[str, str]] = {
    "duckdb": "strata_dagster.backends.duckdb.opening:open_duckdb_session",
    "spark": "strata_dagster.backends.spark.opening:open_spark_session",
}

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
class EngineChoice:
    """The engine, and where a Spark engine finds its cluster (`sc://host:port`; None: a local
    Spark over the warehouse directory)."""

    name: str = DEFAULT_ENGINE
    spark_remote: str | None = None

    @property
    def is_duckdb(self) -> bool:
        return self.name == "duckdb"

    @property
    def capabilities(self) -> Capabilities:
        """What this engine does differently (backends/base.py), known before a session opens."""
        return capabilities_of(self.name)

    @property
    def default_warehouse_name(self) -> str:
        """The warehouse a project uses when none is given: a DuckDB file, or a Spark warehouse folder."""
        return self.capabilities.default_warehouse_name


def capabilities_of(name: str) -> Capabilities:
    """What the engine named `name` (one of ENGINE_NAMES) does differently."""
    return _CAPABILITIES[name]


def engine_choice(name: str | None = None, spark_remote: str | None = None) -> EngineChoice:
    """An engine by name (default: $STRATA_ENGINE, else duckdb); E070-range error for an unknown one."""
    chosen = (name or os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE).strip().lower()
    if chosen not in ENGINE_NAMES:
        raise StrataError(
            E_ENGINE,
            f"`{chosen}` is not an engine strata runs on",
            hint=f"use one of: {', '.join(ENGINE_NAMES)} (--engine or {ENGINE_ENV})",
        )
    remote = spark_remote or os.environ.get(SPARK_REMOTE_ENV) or None
    if remote is not None and chosen != "spark":
        remote = None  # a Spark Connect address set for other commands does not apply to DuckDB
    if remote is not None and not remote.startswith("sc://"):
        raise StrataError(
            E_ENGINE,
            f"`{remote}` is not a Spark Connect address",
            hint=f"write it as sc://host:port (--spark-remote or {SPARK_REMOTE_ENV})",
        )
    return EngineChoice(chosen, remote)


_chosen: EngineChoice | None = None


def current_engine() -> EngineChoice:
    """The engine this process builds on: the one chosen, else the environment's."""
    return _chosen if _chosen is not None else engine_choice()


def chosen_engine() -> EngineChoice | None:
    """The engine chosen for this process, None when the environment decides."""
    return _chosen


def choose_engine(choice: EngineChoice | None) -> None:
    """Make `choice` this process's engine (None: back to the environment's)."""
    global _chosen
    _chosen = choice


@contextmanager
def using_engine(choice: EngineChoice) -> Iterator[EngineChoice]:
    """`choice` as the engine for the duration of the block (tests, tools)."""
    before = _chosen
    choose_engine(choice)
    try:
        yield choice
    finally:
        choose_engine(before)


def engine_opener(choice: EngineChoice) -> Opener:
    """The function that opens sessions of the engine `choice` (imported on first use)."""
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
            E_ENGINE,
            f"the {name} engine is not installed ({error.name or error})",
            hint="pip install 'strata_dagster[spark]' (pyspark) and make sure Java 17 is on the PATH",
        ) from None
    opener: Opener = getattr(module, function)
    return opener


@functools.lru_cache(maxsize=4)
def _version_of(name: str) -> str:
    package = "duckdb" if name == "duckdb" else "pyspark"
    try:
        return f"{name}-{importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{name}-unknown"


def engine_version(choice: EngineChoice | None = None) -> str:
    """The engine and its version, part of every fingerprint: content hashes of two engines are
    computed differently and are never compared (`duckdb-2.0.1`, `spark-4.3.0`)."""
    return _version_of((choice or current_engine()).name)


def engine_label(choice: EngineChoice | None = None) -> str:
    """The engine's name as messages say it: DuckDB, Spark."""
    return {"duckdb": "DuckDB", "spark": "Spark"}[(choice or current_engine()).name]
