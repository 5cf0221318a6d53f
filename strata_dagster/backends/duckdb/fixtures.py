"""An in-memory DuckDB for model unit tests: fixture tables, a model run over them, its rows.

Nothing here opens the warehouse: the types of sources come in as (column, type) pairs read
beforehand (read-only), and every table lives in a database that vanishes with the connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.backends.duckdb.sql import evaluate_in_utc
from strata_dagster.backends.sql.runner import describe, run
from strata_dagster.errors import E_TEST_RUN, Location, StrataError
from strata_dagster.sql.render import data_type, table

TYPES_SCHEMA = "__types"  # empty tables and views: what each relation's columns and types are
CASE_SCHEMA = "__case"  # one test case's fixtures and results, dropped between cases

TypedColumns = tuple[tuple[str, str], ...]


class FixtureDatabase:
    """One in-memory database for a run of unit tests; `reset()` between cases."""

    def __init__(self) -> None:
        self.con = evaluate_in_utc(connect_in_memory())  # a model's unit test computes as its runs
        for schema in (TYPES_SCHEMA, CASE_SCHEMA):
            run(self.con, exp.Create(this=_schema(schema), kind="SCHEMA"))

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> FixtureDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what each relation looks like ----------------------------------------------------------
    def declare_table(self, name: str, columns: TypedColumns) -> None:
        """An empty table with a source's columns and types."""
        run(self.con, _create_table(table(name, TYPES_SCHEMA), columns))

    def declare_view(self, name: str, query: exp.Query) -> bool:
        """A model's statement over the declared relations; False when DuckDB cannot bind it (an
        input whose columns are not known)."""
        create = exp.Create(this=table(name, TYPES_SCHEMA), kind="VIEW", expression=query)
        try:
            run(self.con, create)
        except duckdb.Error:
            return False
        return True

    def columns_of(self, name: str, schema: str = TYPES_SCHEMA) -> TypedColumns | None:
        try:
            return describe(self.con, table(name, schema))
        except duckdb.Error:
            return None

    # -- one case -------------------------------------------------------------------------------
    def reset(self) -> None:
        run(self.con, exp.Drop(tables=[_schema(CASE_SCHEMA)], kind="SCHEMA", cascade=True))
        run(self.con, exp.Create(this=_schema(CASE_SCHEMA), kind="SCHEMA"))

    def create_fixture(
        self,
        name: str,
        schema: TypedColumns | None,
        columns: Sequence[str],
        rows: Sequence[tuple[Sequence[exp.Expr], Location]],
        location: Location,
        other_columns: Sequence[str] = (),
    ) -> None:
        """Table `__case.name` holding `rows` in `columns`, the other columns NULL: typed as
        `schema` when it is known, else typed as the values are written (`other_columns`: the
        names of the other columns, when they are known without their types)."""
        target = table(name, CASE_SCHEMA)
        if schema is None:
            self._create_untyped(target, columns, rows, location, other_columns)
            return
        run(self.con, _create_table(target, schema))
        if not rows:
            return
        try:
            run(self.con, _insert(target, columns, [values for values, _ in rows]))
        except duckdb.Error:
            # Row by row, to point at the row DuckDB rejects (one statement is faster when none is).
            for values, row_location in rows:
                self._execute(_insert(target, columns, [values]), row_location, "a fixture row")
            self._execute(
                _insert(target, columns, [values for values, _ in rows]), location, "the fixture rows"
            )

    def create_result(self, name: str, query: exp.Query, location: Location) -> TypedColumns:
        """Table `__case.name` holding what `query` gives; returns its columns and types."""
        create = exp.Create(this=table(name, CASE_SCHEMA), kind="TABLE", expression=query)
        self._execute(create, location, "the model over the fixtures")
        return describe(self.con, table(name, CASE_SCHEMA))

    def rows(self, query: exp.Query) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in run(self.con, query).fetchall()]

    def _create_untyped(
        self,
        target: exp.Table,
        columns: Sequence[str],
        rows: Sequence[tuple[Sequence[exp.Expr], Location]],
        location: Location,
        other_columns: Sequence[str],
    ) -> None:
        others = [exp.null().as_(column) for column in other_columns if column not in columns]
        if rows:
            values = exp.Values(
                expressions=[exp.tuple_(*(value.copy() for value in values)) for values, _ in rows],
                alias=exp.TableAlias(
                    this=exp.to_identifier("__rows"), columns=[exp.to_identifier(c) for c in columns]
                ),
            )
            query = exp.select("*", *others).from_(values)
        else:
            query = exp.select(*(exp.null().as_(column) for column in columns), *others).limit(0)
        self._execute(exp.Create(this=target, kind="TABLE", expression=query), location, "a fixture table")

    def _execute(self, statement: exp.Expr, location: Location, what: str) -> None:
        try:
            run(self.con, statement)
        except duckdb.Error as error:
            raise StrataError(
                E_TEST_RUN,
                f"DuckDB rejected {what}: {str(error).splitlines()[0]}",
                location,
                hint="fixture values are DuckDB literals (`1`, `'text'`, `date '2025-01-01'`, `null`) "
                "of the column's type; every column the model reads must be known or given",
            ) from None


def _insert(target: exp.Table, columns: Sequence[str], rows: Sequence[Sequence[exp.Expr]]) -> exp.Insert:
    return exp.Insert(
        this=exp.Schema(this=target.copy(), expressions=[exp.to_identifier(column) for column in columns]),
        expression=exp.Values(
            expressions=[exp.tuple_(*(value.copy() for value in values)) for values in rows]
        ),
    )


def _storable(type_name: str) -> str:
    # A column of fixture NULLs written without a type has DuckDB's NULL type, which no table holds.
    return "VARCHAR" if type_name.strip('"') == "NULL" else type_name


def _schema(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name))


def _create_table(target: exp.Table, columns: TypedColumns) -> exp.Create:
    schema = exp.Schema(
        this=target,
        expressions=[
            exp.ColumnDef(this=exp.to_identifier(name), kind=data_type(_storable(type_name)))
            for name, type_name in columns
        ],
    )
    return exp.Create(this=schema, kind="TABLE")
