"""What readers use: the statement that opens the live views of a warehouse's serving copy."""

from __future__ import annotations

from pathlib import Path

from strata_dagster.backends.choice import current_backend
from strata_dagster.backends.duckdb import serving
from strata_dagster.backends.opening import open_session
from strata_dagster.errors import E_BACKEND_UNSUPPORTED, E_NOT_SERVED, E_WAREHOUSE, StrataError


def reader_statement_for(warehouse: Path) -> str:
    """The SQL a fresh DuckDB connection runs to read `main.v_<model>` (and the branch schemas)
    as last published. A warehouse written before the serving copy existed gets one first, and one
    served by an earlier version's catalog a new one."""
    if not current_backend().capabilities.has_serving_copy:
        raise StrataError(
            E_BACKEND_UNSUPPORTED,
            "`strata connect` opens DuckDB's serving copy; on Spark, readers query the live views "
            "(`main.v_<model>`) in Spark itself, which never locks them out",
            hint="use a Spark Connect session (`--spark-remote`), or `strata show PROJECT MODEL --backend spark`",
        )
    if not warehouse.exists():
        raise StrataError(
            E_WAREHOUSE,
            f"warehouse `{warehouse}` does not exist",
            hint="check --warehouse (or STRATA_WAREHOUSE), or run `strata run PROJECT` first",
        )
    if not serving.is_served(warehouse) or serving.is_of_older_format(warehouse):
        with open_session(warehouse, must_exist=True):
            pass  # closing a write session writes the serving copy
    if serving.served_view_count(warehouse) == 0:
        raise StrataError(
            E_NOT_SERVED,
            f"nothing is published in `{warehouse}` yet: readers would see no view",
            hint="run `strata run PROJECT` first; its views are then readable while later runs write",
        )
    return serving.reader_statement(warehouse)


def unserved_views(warehouse: Path) -> dict[str, str]:
    """The live views the serving copy leaves out, and why (a snapshot file they read is damaged)."""
    return serving.left_out(warehouse) if current_backend().capabilities.has_serving_copy else {}
