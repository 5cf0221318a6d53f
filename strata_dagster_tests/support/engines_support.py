"""One acceptance suite, two engines: the same project, sources and checks on DuckDB and on Spark.

`EngineUnderTest` writes source tables, runs the engine and reads relations through the same
Session interface the engine uses, so a test says what it checks once. The Spark side shares one
local Spark per test process (a JVM start costs seconds) over a per-process warehouse directory;
each test starts from an empty catalog.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from strata_dagster.backends.choice import BackendChoice, backend_choice, using_backend
from strata_dagster.backends.opening import open_session
from strata_dagster.backends.sql.runner import describe, run
from strata_dagster.compile.relations import model_view
from strata_dagster.engine.run import RunResult, run_project
from strata_dagster_tests.support.spark_class_archive import driver_env
from strata_dagster_tests.support.spark_support import drop_databases, spark_session

ENGINES = ("duckdb", "spark")
VENV_BIN = Path(sys.executable).parent


def spark_params() -> list:
    """`engine` parameters: duckdb, and spark (marked, so `-m spark` runs the Spark tier alone)."""
    return ["duckdb", pytest.param("spark", marks=pytest.mark.spark)]


def spark_warehouse(spark) -> Path:
    return Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))


def spark_type(duckdb_type: str) -> str:
    return exp.DataType.build(duckdb_type, dialect="duckdb").sql(dialect="spark")


@dataclass
class EngineUnderTest:
    name: str
    warehouse: Path
    root: Path  # a folder of the test's own (projects, files)
    spark: Any = None

    @property
    def choice(self) -> BackendChoice:
        return backend_choice(self.name)

    @contextmanager
    def chosen(self) -> Iterator[None]:
        with using_backend(self.choice):
            yield

    # -- sources ----------------------------------------------------------------------------------
    def write_table(
        self, table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Replace `schema.table` (created when missing) by exactly `rows`."""
        schema = table.split(".")[0]
        if self.name == "spark":
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
            ddl = ", ".join(f"`{name}` {spark_type(kind)}" for name, kind in columns)
            frame = self.spark.createDataFrame([tuple(row) for row in rows], ddl)
            frame.write.mode("overwrite").format("parquet").saveAsTable(table)
            return
        con = duckdb.connect(str(self.warehouse))
        try:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            ddl = ", ".join(f'"{name}" {kind}' for name, kind in columns)
            con.execute(f"CREATE OR REPLACE TABLE {table} ({ddl})")
            if rows:
                marks = ", ".join("?" for _ in columns)
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", [list(row) for row in rows])
        finally:
            con.close()

    # -- the engine -------------------------------------------------------------------------------
    def run(self, project: Path, **options: Any) -> RunResult:
        with self.chosen():
            return run_project(project, self.warehouse, **options)

    def read(self, relation: exp.Table | exp.Query | str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Column names and every row of a relation (a query in DuckDB SQL is rendered for the engine)."""
        if isinstance(relation, str):
            relation = sqlglot.parse_one(relation, read="duckdb")
        if self.name == "spark":
            # Straight to Spark: a session would load the whole history for one query.
            from strata_dagster.backends.spark.connection import SparkConnection

            con = SparkConnection(self.spark)
            try:
                columns = describe(con, relation)
                source = relation.subquery("__read") if isinstance(relation, exp.Query) else relation
                rows = run(con, exp.select("*").from_(source)).fetchall()
            finally:
                con.drop_file_views()
            return [name for name, _ in columns], rows
        with self.chosen(), open_session(self.warehouse, read_only=True) as session:
            columns, rows = session.read_rows(relation)
        return [name for name, _ in columns], rows

    def rows(self, relation: exp.Table | exp.Query | str) -> list[tuple[Any, ...]]:
        return self.read(relation)[1]

    def live(self, model: str, branch: str = "main") -> list[tuple[Any, ...]]:
        return self.rows(model_view(model, branch))

    def strata(
        self, *arguments: str, env: dict[str, str] | None = None, check: bool = False
    ) -> subprocess.CompletedProcess:
        """The `strata` CLI of this venv in a subprocess, on this engine and warehouse."""
        command = [
            str(VENV_BIN / "strata"),
            *arguments,
            "--engine",
            self.name,
            "--warehouse",
            str(self.warehouse),
        ]
        # A local Spark in the CLI maps the suite's class archive, if it was built after this
        # process's own JVM started without it.
        archive = driver_env() if self.name == "spark" else {}
        result = subprocess.run(
            command, capture_output=True, text=True, env={**archive, **os.environ, **(env or {})}, timeout=600
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
        return result


def normalised(rows: Sequence[Sequence[Any]]) -> Counter:
    """Rows as a multiset, with values both engines give alike: decimals by value, and doubles to
    nine significant digits (a DOUBLE sum's last bits depend on the order rows are added in, which
    differs between engines and between runs of one)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Decimal):
            return value.normalize()
        if isinstance(value, float):
            return float(f"{value:.9g}")
        if isinstance(value, list):
            return tuple(plain(item) for item in value)
        return value

    return Counter(tuple(plain(value) for value in row) for row in rows)


@contextmanager
def engine_under_test(name: str, tmp_path: Path) -> Iterator[EngineUnderTest]:
    if name == "duckdb":
        yield EngineUnderTest("duckdb", tmp_path / "w.duckdb", tmp_path)
        return
    spark = spark_session()
    drop_databases(spark)
    try:
        yield EngineUnderTest("spark", spark_warehouse(spark), tmp_path, spark)
    finally:
        drop_databases(spark)
