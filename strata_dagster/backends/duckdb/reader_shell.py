"""A minimal SQL shell over the serving copy, for `strata connect` where no `duckdb` CLI is installed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.backends.duckdb.serving import reader_statement
from strata_dagster.backends.duckdb.sql import evaluate_in_utc
from strata_dagster.errors import first_line


@dataclass(frozen=True)
class ShellResult:
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    error: str | None = None


class ReaderShell:
    """An in-memory DuckDB connection that ran `reader_statement`: the live views by their names."""

    def __init__(self, warehouse: Path) -> None:
        self.con = evaluate_in_utc(connect_in_memory())  # a view model's rows as verify computes them
        self.con.execute(reader_statement(warehouse))

    def execute(self, text: str, limit: int = 1_000) -> ShellResult:
        try:
            cursor = self.con.execute(text)
            if cursor.description is None:
                return ShellResult((), [])
            return ShellResult(
                tuple(str(column[0]) for column in cursor.description), cursor.fetchmany(limit)
            )
        except duckdb.Error as error:
            return ShellResult((), [], first_line(error))

    def close(self) -> None:
        self.con.close()
