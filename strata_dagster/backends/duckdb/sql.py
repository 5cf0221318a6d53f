"""Settings of a DuckDB connection, made with sqlglot statements (the SQL itself is built in
strata_dagster.sql and run through backends/sql/runner.py)."""

from __future__ import annotations

import duckdb
from sqlglot import exp

from strata_dagster.backends.sql.runner import run

# Every statement strata runs is evaluated in UTC, as on Spark (`spark.sql.session.timeZone`): a
# TIMESTAMPTZ cut into days (`cast(ts as date)`, `date_trunc('day', ts)`) gives the same rows
# whatever the zone of the machine or process that runs it (a Dagster worker, a laptop's CLI).
EVALUATION_TIME_ZONE = "UTC"


def evaluate_in_utc(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """`con` with its session's time zone set to `EVALUATION_TIME_ZONE` (this connection only: an
    instance a notebook also holds keeps its own)."""
    set_option(con, "TimeZone", EVALUATION_TIME_ZONE, scope="SESSION")
    return con


def set_option(con: duckdb.DuckDBPyConnection, name: str, value: str, *, scope: str | None = None) -> None:
    """`SET [scope] name = 'value'` (DuckDB's default scope when None)."""
    setting = exp.EQ(this=exp.column(name), expression=exp.Literal.string(value))
    run(con, exp.Set(expressions=[exp.SetItem(this=setting, kind=scope)]))
