"""A class archive for the suite's Spark JVMs (JDK 17's dynamic AppCDS): the classes a strata run
loads (Spark SQL, the Hive catalog, Parquet), dumped once per machine by a JVM that built the
acceptance project and exited, then mapped by every later JVM instead of loaded and verified
again. Here a JVM reached its first statements in 14-15 s instead of 23-26 s idle (23-24 s
instead of 37-41 s with the suite running beside it); the Spark kill test, four driver JVMs, took
150 s instead of 185 s alone.

The archive costs about a minute to build (the project's build, then the dump at exit), which a
fresh machine pays once: about what its later JVMs save in one suite run. The gain is every run
after the first on the same machine.

`java_options()` builds the archive on first use (under a file lock) and answers the
`-XX:SharedArchiveFile` option. A process that finds another one building it does not wait for
the build (a minute or more, which kept the second pytest worker idle on a fresh machine): its JVM
starts without the archive (about 10 s slower) and a later JVM of the same process maps it once
it exists. A JVM maps only a whole archive: a truncated one crashes it, so a new archive is
written under a temporary name and renamed once the JVM that dumped it has exited cleanly. When
the build fails, the suite runs without one (slower, never wrong).

`python -m strata_dagster_tests.support.spark_archive_workload` runs the workload the archive is dumped from.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

from strata_dagster_tests.support.java import java_version

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "strata-tests"
# Every JVM of the suite runs tiny queries while the other worker holds the second core: C2
# compiling Spark's generated classes and a parallel collector took half of a JVM's CPU there
# (C2's thread 24 s of 59 s). Without them a Spark module took 30-40% less CPU (delta figures:
# 54-64 s against 85-96 s; acceptance operations 146 s against 169-211 s), its wall alone -10%
# to +10%: the suite is CPU-bound, so less CPU is a shorter suite.
LEAN_JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_options: str | None = None


def java_options() -> str:
    """The JVM option that maps this machine's archive ('' when it could not be built)."""
    global _options
    if _options is None:
        path = _archive_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "w") as lock:
                if not path.exists():
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # another process is building it: ask again later
                        return ""
                    if not path.exists():
                        _build(path)
        except OSError as error:  # no cache folder to write: the JVMs load their classes
            warnings.warn(f"no Spark class archive (the Spark tier runs slower): {error}", stacklevel=2)
        _options = f"-XX:SharedArchiveFile={path}" if path.exists() else ""
    return _options


def jvm_options() -> str:
    """The options of every JVM the suite starts: the archive, if built, and the lean compiler."""
    return " ".join(filter(None, (java_options(), LEAN_JIT)))


def driver_env() -> dict[str, str]:
    """The environment of a process whose local Spark runs with the suite's JVM options."""
    from strata_dagster.backends.spark.connect import DRIVER_JAVA_OPTIONS_ENV

    return {DRIVER_JAVA_OPTIONS_ENV: jvm_options()}


def _archive_path() -> Path:
    """One archive per Spark jars folder, pyspark and Java: another of them needs its own."""
    import pyspark

    key = "\n".join((str(Path(pyspark.__file__).parent), pyspark.__version__, java_version() or ""))
    return CACHE / f"spark-{pyspark.__version__}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def _build(path: Path) -> None:
    from strata_dagster.backends.spark.connect import DRIVER_JAVA_OPTIONS_ENV

    for left in path.parent.glob("*.partial"):  # by a build that died (builds hold the lock)
        left.unlink(missing_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    env = {**os.environ, DRIVER_JAVA_OPTIONS_ENV: f"-XX:ArchiveClassesAtExit={partial}"}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "strata_dagster_tests.support.spark_archive_workload"],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        result = subprocess.CompletedProcess(error.cmd, -1, "", f"no archive after {error.timeout} s")
    if result.returncode == 0 and partial.exists():
        partial.replace(path)
        for other in path.parent.glob("spark-*.jsa"):
            if other != path:
                other.unlink(missing_ok=True)
        return
    partial.unlink(missing_ok=True)
    warnings.warn(
        f"no Spark class archive (the Spark tier runs slower): {result.stderr[-1500:]}", stacklevel=2
    )
