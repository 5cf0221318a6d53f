"""Spark sessions as the engine opens them: a local Spark over a warehouse directory with its own
embedded catalog, or a Spark Connect server (`sc://host:port`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pyspark.sql import SparkSession

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
# More options for a local Spark's driver JVM (`-Xmx8g`, say). The test suite sets
# `-XX:TieredStopAtLevel=1 -XX:+UseSerialGC` for every JVM it starts: over tiny data, C2
# compilation and a parallel collector cost more of two cores than they give back.
DRIVER_JAVA_OPTIONS_ENV = "STRATA_SPARK_DRIVER_JAVA_OPTIONS"
# Settings every strata Spark session has: UTC (strata's timestamps are UTC-naive, like DuckDB's),
# no web UI (nothing listens on a port it does not need), ANSI arithmetic (errors, not NULLs).
SESSION_SETTINGS: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.ansi.enabled": "true",
    # DuckDB's TIMESTAMP has no time zone: Spark's TIMESTAMP_NTZ is the same, for casts and for
    # Arrow or Parquet data without a zone alike.
    "spark.sql.timestampType": "TIMESTAMP_NTZ",
    "spark.ui.showConsoleProgress": "false",
}


def _quiet_query_errors() -> None:
    """pyspark logs every failed query's JVM stack trace as JSON on stderr; strata reports each
    failure itself, as a coded error with Spark's first message line."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def local_session(warehouse: Path, *, cores: int = 2, shuffle_partitions: int = 2) -> SparkSession:
    """A local Spark whose tables live under `warehouse`, with the catalog (an embedded Derby
    metastore) in `warehouse/metastore_db`, so separate processes over the same directory see the
    same tables (one process at a time: embedded Derby admits one JVM)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = warehouse.resolve()
    warehouse.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("strata")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={warehouse / 'metastore_db'};create=true",
        )
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dderby.system.home={warehouse} -Dlog4j2.configurationFile=file:{LOG_CONFIG} "
            + os.environ.get(DRIVER_JAVA_OPTIONS_ENV, ""),
        )
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    )
    for key, value in SESSION_SETTINGS.items():
        builder = builder.config(key, value)
    _quiet_query_errors()
    return builder.enableHiveSupport().getOrCreate()


def remote_session(url: str) -> SparkSession:
    """A Spark Connect client of the server at `url` (`sc://host:port`)."""
    _quiet_query_errors()
    session = SparkSession.builder.remote(url).getOrCreate()
    for key, value in SESSION_SETTINGS.items():
        if key.startswith("spark.sql."):
            session.conf.set(key, value)
    return session
