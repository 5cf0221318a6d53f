"""Opening a Spark warehouse: the Spark session for it (local over the directory, or a Spark
Connect client), one local writer at a time, the history loaded, and an interrupted publication
repaired (a writer) or reported (a reader)."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from strata_dagster.backends.choice import BackendChoice
from strata_dagster.backends.spark.connect import local_session, remote_session
from strata_dagster.backends.spark.connection import SparkConnection, SparkError
from strata_dagster.backends.spark.repair import repair_interrupted
from strata_dagster.backends.spark.session import SparkWarehouseSession
from strata_dagster.errors import E_BACKEND, E_WAREHOUSE, E_WAREHOUSE_BUSY, StrataError

if TYPE_CHECKING:  # for annotations (the function imports it where it runs)
    from pyspark.sql import SparkSession

_LOCK_NAME = ".strata-writer.lock"


def _spark_for(warehouse: Path, choice: BackendChoice) -> SparkSession:
    if choice.spark_remote is not None:
        return remote_session(choice.spark_remote)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        running = Path((active.conf.get("spark.sql.warehouse.dir") or "").removeprefix("file:")).resolve()
        if running != warehouse.resolve():
            raise StrataError(
                E_BACKEND,
                f"this process already runs a Spark session over `{running}`, not `{warehouse}`",
                hint="a process builds one Spark warehouse: pass the same --warehouse, or start another process",
            )
        return active
    return local_session(warehouse)


@contextmanager
def _writer_lock(warehouse: Path, timeout: float | None) -> Iterator[None]:
    """One writer per local warehouse directory at a time (a Spark Connect cluster: Dagster's
    pool serializes writers instead)."""
    warehouse.mkdir(parents=True, exist_ok=True)
    handle = open(warehouse / _LOCK_NAME, "a+")  # noqa: SIM115 - held for the whole session
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if timeout == 0:
                raise StrataError(
                    E_WAREHOUSE_BUSY,
                    f"Spark warehouse `{warehouse}` is being written by another process",
                    hint="wait for the other run to finish",
                ) from None
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()


@contextmanager
def open_spark_session(
    path: Path,
    choice: BackendChoice,
    *,
    read_only: bool = False,
    must_exist: bool = False,
    timeout: float | None = None,
) -> Iterator[SparkWarehouseSession]:
    """Open the Spark warehouse at `path` (a directory with its own catalog, or a Spark Connect
    server's): history loaded, an interrupted publication repaired (writers) or reported."""
    is_local = choice.spark_remote is None
    if is_local and (read_only or must_exist) and not (path / "metastore_db").exists():
        raise StrataError(
            E_WAREHOUSE,
            f"Spark warehouse `{path}` does not exist",
            hint="check --warehouse (or STRATA_WAREHOUSE), or run `strata run PROJECT --backend spark` first",
        )
    lock = _writer_lock(path, timeout) if is_local and not read_only else _no_lock()
    with lock:
        spark = _spark_for(path, choice)
        con = SparkConnection(spark, is_local=is_local)
        try:
            session = SparkWarehouseSession(con, path, read_only=read_only)
        except SparkError as error:
            raise StrataError(E_WAREHOUSE, f"cannot read Spark warehouse `{path}`: {error}") from None
        try:
            if must_exist and not session.has_history():
                raise StrataError(
                    E_WAREHOUSE,
                    f"Spark warehouse `{path}` holds no strata history",
                    hint="run `strata run PROJECT --backend spark` first",
                )
            if session.interrupted and not read_only:
                repair_interrupted(session)
            yield session
            if not read_only:
                session.flush()
        finally:
            session.close()


@contextmanager
def _no_lock() -> Iterator[None]:
    yield
