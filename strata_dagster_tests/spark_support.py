"""The Spark tier: one local Spark per test process (pytest-xdist runs one per worker, so one JVM
each), started on first use and kept for the whole process, since a JVM takes 5 s to start idle
and 20 s or more on a loaded machine.

Tests ask for the `spark` fixture (they are marked `spark` automatically, see conftest), and for
`clean_spark` to start from an empty catalog. STRATA_SKIP_SPARK=1 skips the tier on request; a
machine without Java 17 fails it, saying how to install it (as the browser tier does for Chromium).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from sqlglot import exp

SKIP_ENV = "STRATA_SKIP_SPARK"
INSTALL = (
    "install Java 17 (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless, or set JAVA_HOME) "
    "and pyspark (pip install -e '.[test]')"
)
_session = None


def require_spark() -> None:
    """FAILS (never skips silently) when Java 17+ or pyspark is missing, unless STRATA_SKIP_SPARK=1."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the Spark tier is skipped on request")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.fail(f"the Spark tier needs pyspark: {INSTALL} (or set {SKIP_ENV}=1)")
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not Path(java).exists():
        pytest.fail(f"the Spark tier needs Java 17 (no `java` found): {INSTALL} (or set {SKIP_ENV}=1)")
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    found = re.search(r'version "(\d+)', version)
    if found is None or int(found.group(1)) < 17:
        pytest.fail(f"the Spark tier needs Java 17 or later (found: {version.splitlines()[:1]}): {INSTALL}")


def spark_session():
    """This process's local Spark (local[2], 2 shuffle partitions, UTC), over a warehouse directory
    of its own that is removed when the process ends."""
    global _session
    if _session is None:
        require_spark()
        from strata_dagster.spark.connect import local_session

        folder = Path(tempfile.mkdtemp(prefix=f"strata-spark-{os.getpid()}-"))
        _session = local_session(folder / "warehouse", cores=2, shuffle_partitions=2)
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
    tables and this session's temporary views dropped too."""
    for database in spark.catalog.listDatabases():
        if database.name != "default":
            drop = exp.Drop(kind="DATABASE", this=exp.to_identifier(database.name), exists=True, cascade=True)
            spark.sql(drop.sql(dialect="spark"))
    for table in spark.catalog.listTables("default"):
        if table.isTemporary:
            spark.catalog.dropTempView(table.name)
        else:
            drop = exp.Drop(kind="TABLE", this=exp.table_(table.name, db="default"), exists=True)
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
