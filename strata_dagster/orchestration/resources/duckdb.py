"""`StrataDuckDBResource`: dagster-duckdb's `DuckDBResource` for users' own assets, reading the live
views of a strata warehouse through its serving copy (backends.duckdb.serving), read-only.

A connection is an in-memory DuckDB that has attached the serving copy's catalog read-only under
the views' usual names (`SELECT * FROM main.v_daily_revenue`): it sees the one whole published
state that was live when it attached, never opens the warehouse file, and so never blocks or waits
for a run that writes (DuckDB lets no other process open a file one process writes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster_duckdb import DuckDBResource
from pydantic import Field, field_validator

from strata_dagster.backends.duckdb.serving import is_served, reader_statement
from strata_dagster.errors import E_NOT_SERVED, StrataError
from strata_dagster.orchestration.failures import as_failure

IN_MEMORY = ":memory:"


class StrataDuckDBResource(DuckDBResource):
    """Read the live views of a strata warehouse from your own assets, as dagster-duckdb does:
    `with strata_duckdb.get_connection() as con: con.sql("SELECT * FROM main.v_orders_enriched")`."""

    warehouse: str = Field(
        description="The strata warehouse (DuckDB file) whose live views are read, through its serving copy."
    )
    database: str = Field(
        default=IN_MEMORY,
        description="Always `:memory:`: the views are attached read-only from the serving copy.",
    )

    @field_validator("database")
    @classmethod
    def _in_memory(cls, value: str) -> str:
        if value != IN_MEMORY:
            raise ValueError(
                f"database `{value}`: StrataDuckDBResource never opens a file (a reader would block "
                "the warehouse's writer); leave `database` unset and give `warehouse`"
            )
        return value

    @contextmanager
    def get_connection(self) -> Iterator[Any]:
        warehouse = Path(self.warehouse)
        if not is_served(warehouse):
            # A step's failure with strata's message (this runs in the user's asset).
            raise as_failure(
                StrataError(
                    E_NOT_SERVED,
                    f"the warehouse {warehouse} has no serving copy yet: nothing is published",
                    hint="materialize a strata model first (any run that publishes writes the serving copy)",
                )
            )
        with super().get_connection() as con:
            con.execute(reader_statement(warehouse))
            yield con
