"""The workload the suite's Spark class archive is dumped from (spark_class_archive.py runs it with
`python -m strata_dagster_tests.support.spark_archive_workload`; nothing imports it)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from pyspark import SparkContext

from strata_dagster.backends.spark.connect import local_session
from strata_dagster_tests.support.acceptance_support import MODELS, Sources, differences, make_project
from strata_dagster_tests.support.engines_support import EngineUnderTest


def workload() -> None:
    """A first build of the acceptance project, its live views and full rebuilds read back; then
    the JVM is stopped and waited for, since it writes the archive as it exits."""
    root = Path(tempfile.mkdtemp(prefix="strata-class-archive-"))
    spark = local_session(root / "warehouse")
    spark.sparkContext.setLogLevel("OFF")
    engine = EngineUnderTest("spark", root / "warehouse", root, spark)
    sources = Sources()
    for cust, status, value in ((0, "open", 1), (1, "paid", 4), (2, "void", 2)):
        sources.insert(cust, status, value)
    sources.write(engine)
    engine.run(make_project(root))
    for model in MODELS:
        differences(engine, model)
    gateway = SparkContext._gateway
    spark.stop()
    assert gateway is not None
    java = gateway.proc  # pyspark's launcher: the JVM exits when its stdin closes
    gateway.shutdown()
    java.stdin.close()
    exited = java.wait(timeout=600)
    shutil.rmtree(root, ignore_errors=True)
    if exited != 0:
        raise SystemExit(f"the JVM exited with {exited}")


if __name__ == "__main__":
    workload()
