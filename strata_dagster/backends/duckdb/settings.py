"""Every STRATA_* environment variable strata reads, checked together before a command starts: a
bad value is its coded error, naming the variable, before anything is read or written (each is
also checked where it is read, for callers that start elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

from strata_dagster.backends.choice import backend_choice, capabilities_of
from strata_dagster.backends.duckdb.connection import WAREHOUSE_ENV, check_warehouse_path, lock_timeout
from strata_dagster.backends.duckdb.limits import resource_limits
from strata_dagster.backends.duckdb.serving_names import grace_seconds
from strata_dagster.backends.duckdb.snapshot_files import storage


def check_environment(engine: str | None = None) -> None:
    """E020 for STRATA_LOCK_TIMEOUT, E034 for STRATA_SERVING_GRACE, E033 for STRATA_MEMORY_LIMIT,
    STRATA_MAX_TEMP_SIZE or STRATA_TEMP_DIRECTORY, E037 for STRATA_SNAPSHOT_STORAGE, E071 for
    STRATA_BACKEND (or STRATA_ENGINE) or STRATA_SPARK_REMOTE; with the `engine` (backend) the
    warehouse is for, E020 for a STRATA_WAREHOUSE it cannot use (the command line checks it once a
    command's --backend is read)."""
    backend_choice()
    lock_timeout()
    grace_seconds()
    storage()
    resource_limits(Path("warehouse.duckdb"))  # reads the limits only: nothing is opened
    warehouse = os.environ.get(WAREHOUSE_ENV)
    if warehouse and engine is not None:
        is_file = capabilities_of(engine).has_warehouse_file
        check_warehouse_path(Path(warehouse), is_file=is_file, setting=WAREHOUSE_ENV)
