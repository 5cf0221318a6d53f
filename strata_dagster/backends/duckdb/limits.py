"""How much memory and spill space DuckDB may take: from the environment, with bounded defaults.

DuckDB's own defaults (80% of RAM, and a spill folder allowed to fill 90% of the disk) let one bad
model exhaust a shared machine; these defaults leave room for everything else on it.

The memory limit bounds DuckDB's buffer manager (the data it holds: tables, hash tables, sorts,
Parquet reads and writes) in every DuckDB database this process opens, the warehouse and the
in-memory ones alike; beyond it DuckDB spills to the spill folder. It does not bound the Python
interpreter and the libraries around DuckDB (about 120 MB for the command line; figures in the
README). DuckDB needs a share of the limit per thread to spill: under PER_THREAD_BYTES a thread,
it runs on fewer threads, so a small limit makes builds slower instead of failing.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb

from strata_dagster.backends.duckdb.sql import set_option
from strata_dagster.errors import E_RESOURCE_LIMIT, StrataError
from strata_dagster.paths import path_problem, shortened

MEMORY_LIMIT_ENV = "STRATA_MEMORY_LIMIT"
MAX_TEMP_SIZE_ENV = "STRATA_MAX_TEMP_SIZE"
TEMP_DIRECTORY_ENV = "STRATA_TEMP_DIRECTORY"
DEFAULT_MEMORY_LIMIT = "50%"
# The spill folder may take at most this much, and never more than half the free disk.
DEFAULT_MAX_TEMP_BYTES = 16 * 1024**3

# ASCII digits only: `\d` would take `٣GB`, which DuckDB then refuses as no number.
_SIZE = re.compile(
    r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)\s*$", re.IGNORECASE | re.ASCII
)
_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$", re.ASCII)
_UNIT_BYTES = {
    **{unit: 1000**power for power, unit in enumerate(("B", "KB", "MB", "GB", "TB"))},
    **{unit: 1024**power for power, unit in enumerate(("B", "KIB", "MIB", "GIB", "TIB"))},
}
MAX_SIZE_BYTES = 1024**5  # 1 PiB: more memory or spill space than any machine strata runs on
# Memory a DuckDB thread needs for a build to spill rather than fail: with 2 threads a 1M-row
# shop's full refresh failed at 40 MB and passed at 50 MB, with one thread it passed at 30 MB.
PER_THREAD_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class ResourceLimits:
    memory_limit: str
    max_temp_directory_size: str
    temp_directory: Path
    threads: int | None = None  # None: DuckDB's own (one per core)

    def duckdb_config(self) -> dict[str, str | bool | int | float | list[str]]:
        return {
            "memory_limit": self.memory_limit,
            "max_temp_directory_size": self.max_temp_directory_size,
            "temp_directory": str(self.temp_directory),
            **({"threads": str(self.threads)} if self.threads is not None else {}),
        }


def check_size(setting: str, value: str, *, allow_percent: bool = False) -> str:
    """`value` if DuckDB reads it as a positive size (e.g. 4GB, 512MiB; 50% when allowed)."""
    size = _SIZE.match(value)
    percent = _PERCENT.match(value) if allow_percent else None
    if size is not None and 0 < float(size.group(1)) * _UNIT_BYTES[size.group(2).upper()] <= MAX_SIZE_BYTES:
        return value.strip()
    if percent is not None and 0 < float(percent.group(1)) <= 100:
        return value.strip()
    example = "4GB, 512MiB or 50% (of RAM)" if allow_percent else "4GB or 512MiB"
    raise StrataError(
        E_RESOURCE_LIMIT,
        f"{setting}={value!r} is not a size",
        hint=f"give a positive size with a unit (ASCII digits, at most 1PiB), e.g. {example}",
    )


def limit_bytes(limit: str) -> int:
    """A checked memory limit in bytes (a percentage of this machine's RAM)."""
    size = _SIZE.match(limit)
    if size is not None:
        return int(float(size.group(1)) * _UNIT_BYTES[size.group(2).upper()])
    percent = _PERCENT.match(limit)
    assert percent is not None, limit
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(float(percent.group(1)) / 100 * ram)


def threads_within(limit: str) -> int | None:
    """The threads DuckDB runs on under memory `limit`: fewer than the cores when the limit leaves
    a thread less than PER_THREAD_BYTES (None: DuckDB's own choice, one per core)."""
    cores = os.cpu_count() or 1
    affordable = limit_bytes(limit) // PER_THREAD_BYTES
    return max(1, affordable) if affordable < cores else None


def check_temp_directory(setting: str, value: str) -> Path:
    """`value` as the spill folder, if it can be one: a path the OS can use that is no file."""
    folder = Path(value)
    problem = path_problem(folder)
    if problem is None and folder.exists() and not folder.is_dir():
        problem = "it is a file, not a folder"
    if problem is not None:
        raise StrataError(
            E_RESOURCE_LIMIT,
            f"{setting}={shortened(folder)!r} cannot be the spill folder: {problem}",
            hint="name a folder (it is created when DuckDB first spills), or unset it for WAREHOUSE.tmp",
        )
    return folder


def resource_limits(warehouse: Path) -> ResourceLimits:
    """The limits for a connection to `warehouse`, read from the environment now."""
    folder = os.environ.get(TEMP_DIRECTORY_ENV)
    temp_directory = (
        check_temp_directory(TEMP_DIRECTORY_ENV, folder)
        if folder
        else warehouse.with_name(warehouse.name + ".tmp")
    )
    memory = os.environ.get(MEMORY_LIMIT_ENV)
    temp_size = os.environ.get(MAX_TEMP_SIZE_ENV)
    memory_limit = (
        check_size(MEMORY_LIMIT_ENV, memory, allow_percent=True) if memory else DEFAULT_MEMORY_LIMIT
    )
    return ResourceLimits(
        memory_limit=memory_limit,
        max_temp_directory_size=(
            check_size(MAX_TEMP_SIZE_ENV, temp_size) if temp_size else _default_temp_size(temp_directory)
        ),
        temp_directory=temp_directory,
        threads=threads_within(memory_limit),
    )


def connect_within_limits(path: Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to `path` under the configured limits."""
    limits = resource_limits(path)
    try:
        return duckdb.connect(str(path), read_only=read_only, config=limits.duckdb_config())
    except duckdb.ConnectionException as error:
        if "different configuration" not in str(error):
            raise
    # This process already has the file open under other settings (a notebook's own connection):
    # join that instance, whose spill folder is fixed by now, and bound its memory and spill size.
    con = duckdb.connect(str(path), read_only=read_only)
    _bound(con, limits)
    return con


def connect_in_memory() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database under the same memory limit, threads and spill size as the
    warehouse's; it spills to STRATA_TEMP_DIRECTORY when that is set, else where DuckDB does
    for in-memory databases (`.tmp` in the working folder)."""
    config = resource_limits(Path(".tmp")).duckdb_config()
    if not os.environ.get(TEMP_DIRECTORY_ENV):
        del config["temp_directory"]
    return duckdb.connect(config=config)


def _bound(con: duckdb.DuckDBPyConnection, limits: ResourceLimits) -> None:
    for setting, value in (
        ("memory_limit", limits.memory_limit),
        ("max_temp_directory_size", limits.max_temp_directory_size),
        ("threads", str(limits.threads) if limits.threads is not None else None),
    ):
        if value is not None:
            set_option(con, setting, value)


def _default_temp_size(temp_directory: Path) -> str:
    existing = next((folder for folder in (temp_directory, *temp_directory.parents) if folder.exists()), None)
    free = shutil.disk_usage(existing).free if existing is not None else DEFAULT_MAX_TEMP_BYTES
    return f"{max(min(DEFAULT_MAX_TEMP_BYTES, free // 2), 1024**2)}B"


def exceeded_setting(message: str) -> str:
    """The environment variable to raise for a DuckDB out-of-memory message."""
    return MAX_TEMP_SIZE_ENV if "max_temp_directory_size" in message else MEMORY_LIMIT_ENV


def raise_hint(setting: str) -> str:
    option = "--memory-limit" if setting == MEMORY_LIMIT_ENV else "--max-temp-size"
    return f"raise {setting} (or `strata {option} SIZE ...`)"


def exceeded_error(error: duckdb.OutOfMemoryException) -> StrataError:
    """An out-of-memory error outside any one model's build (reading the history, compacting)."""
    text = str(error)
    return StrataError(
        E_RESOURCE_LIMIT,
        f"DuckDB exceeded the warehouse's limit: {text.splitlines()[0] if text else 'out of memory'}",
        hint=raise_hint(exceeded_setting(text)),
    )
