"""The Spark tier: one local Spark per test process (pytest-xdist runs one per worker, so one JVM
each), started on first use and kept for the whole process, since a JVM takes 5 s to start idle
and 20 s or more on a loaded machine.

Tests ask for the `spark` fixture (they are marked `spark` automatically, see conftest), and for
`clean_spark` to start from an empty catalog. STRATA_SKIP_SPARK=1 skips the tier on request; a
machine without Java 17 skips it with one line saying how to install it (as the browser tier does
for Chromium), and fails it instead under STRATA_REQUIRE_SPARK=1, as `.ci/run` sets.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlglot import exp

from strata_dagster_tests.support.java import java_version
from strata_dagster_tests.support.spark_class_archive import java_options, jvm_options

SKIP_ENV = "STRATA_SKIP_SPARK"
REQUIRE_ENV = "STRATA_REQUIRE_SPARK"  # .ci/run sets it: there missing Java fails the tier
SKIPPED = "Spark tier skipped: "  # conftest sums these skips up in one line
INSTALL = (
    "install Java 17 (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless, or set JAVA_HOME) "
    "and pyspark (pip install -e '.[test]')"
)
_session = None

# An upsert over a cdc source with a filter: the Spark tier's small delta project.
UPSERT_PROJECT = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model latest {
  from orders
  filter status <> 'cancelled'
  select order_id, status, updated_at
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}
"""


def require_spark() -> None:
    """Java 17+ and pyspark. Without them the tier is skipped, saying how to install them, unless
    STRATA_REQUIRE_SPARK=1 (CI) makes that a failure; STRATA_SKIP_SPARK=1 skips it on request."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIPPED}{SKIP_ENV}=1 asks so")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _missing("pyspark")
    version = java_version()
    if version is None:
        _missing("Java 17 (no `java` on the PATH or in JAVA_HOME)")
        return
    found = re.search(r'version "(\d+)', version)
    if found is None or int(found.group(1)) < 17:
        _missing(f"Java 17 or later (found: {version.splitlines()[:1]})")


def _missing(what: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"the Spark tier needs {what}: {INSTALL} ({REQUIRE_ENV}=1 requires the tier)")
    pytest.skip(f"{SKIPPED}no {what} on this machine; to run it: {INSTALL}")


def spark_session():
    """This process's local Spark (local[2], 2 shuffle partitions, UTC), over a warehouse directory
    of its own that is removed when the process ends."""
    global _session
    if _session is None:
        require_spark()
        from strata_dagster.backends.spark.connect import DRIVER_JAVA_OPTIONS_ENV, local_session

        # This JVM and every one a test starts from here (a CLI or driver process) run with the
        # suite's JVM options, unless options were given. While another process still builds the
        # class archive, only this JVM gets them: later processes ask again and map it once built.
        # (Asked before the options are composed: an archive finished in between is then left to
        # the later processes, never dropped from their options for good.)
        is_lent = DRIVER_JAVA_OPTIONS_ENV not in os.environ and not java_options()
        os.environ.setdefault(DRIVER_JAVA_OPTIONS_ENV, jvm_options())
        folder = Path(tempfile.mkdtemp(prefix=f"strata-spark-{os.getpid()}-"))
        try:
            _session = local_session(folder / "warehouse", cores=2, shuffle_partitions=2)
        finally:
            if is_lent:
                del os.environ[DRIVER_JAVA_OPTIONS_ENV]
        _session.sparkContext.setLogLevel("ERROR")
        atexit.register(_stop, folder)
    return _session


def _stop(folder: Path) -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
    shutil.rmtree(folder, ignore_errors=True)


def drop_databases(spark) -> None:
    """An empty catalog: every database but `default` dropped with its tables, and `default`'s own
    tables and this session's temporary views dropped too. Listed with SHOW, not
    `spark.catalog.listDatabases()`, which reads each database's metadata from the metastore: 0.25 s
    for four databases against 0.04 s, twice a test."""
    for (database,) in spark.sql("SHOW DATABASES").collect():
        if database != "default":
            drop = exp.Drop(kind="DATABASE", tables=[exp.to_identifier(database)], exists=True, cascade=True)
            spark.sql(drop.sql(dialect="spark"))
    for _, table, is_temporary in spark.sql("SHOW TABLES IN default").collect():
        if is_temporary:
            spark.catalog.dropTempView(table)
        else:
            drop = exp.Drop(kind="TABLE", tables=[exp.table_(table, db="default")], exists=True)
            spark.sql(drop.sql(dialect="spark"))


@pytest.fixture(scope="session")
def spark():
    """The process's Spark session (started once)."""
    return spark_session()


@pytest.fixture
def clean_spark(spark):
    """The Spark session, with an empty catalog before the test and after it."""
    drop_databases(spark)
    yield spark
    drop_databases(spark)


@contextmanager
def spark_connect_server(folder: Path) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 (pyspark's own start script), its catalog in `folder`;
    yields its `sc://` address and stops it afterwards."""
    require_spark()
    import pyspark

    home = Path(pyspark.__file__).parent
    port = _free_port()
    warehouse = folder / "connect-warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_PID_DIR": str(folder / "pids"),
        "SPARK_LOG_DIR": str(folder / "logs"),
        "SPARK_IDENT_STRING": f"strata-{port}",
    }
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={warehouse / 'metastore_db'};create=true",
        "spark.sql.catalogImplementation": "hive",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.master": "local[2]",
        "spark.driver.extraJavaOptions": jvm_options(),
    }
    arguments = [item for key, value in settings.items() for item in ("--conf", f"{key}={value}")]
    subprocess.run(
        [str(home / "sbin" / "start-connect-server.sh"), *arguments], env=env, check=True, capture_output=True
    )
    try:
        deadline = time.monotonic() + 300
        while not _is_listening(port):
            if time.monotonic() > deadline:
                logs = "\n".join(path.read_text()[-2000:] for path in (folder / "logs").glob("*.out"))
                raise AssertionError(f"the Spark Connect server did not listen on {port}:\n{logs}")
            time.sleep(1)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(
            [str(home / "sbin" / "stop-connect-server.sh")], env=env, check=False, capture_output=True
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _is_listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0
