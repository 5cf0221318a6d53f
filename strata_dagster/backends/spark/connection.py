"""A Spark session as the warehouse code's connection: sqlglot statements in, rows out.

`backends.sql.runner.run(con, statement)` hands a tree to `run_statement` when the connection has one:
here the tree is rewritten for Spark (spark.statements, and the language-level rewrites of
backends.spark.dialect.translate rewrote the models' own statements when the project was compiled for
Spark: engine.context), rendered, and run. Results come back as
tuples, like DuckDB's; column types as DuckDB spells them, so the engine's decisions (is this a
DATE? a TIMESTAMP?) read the same on both backends. Spark's errors become WarehouseError with their
first line, never a JVM stack trace.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import Row, SparkSession
from sqlglot import exp

from strata_dagster.backends.base import WarehouseError
from strata_dagster.backends.spark import statements
from strata_dagster.backends.spark.types import duckdb_type_name
from strata_dagster.errors import E_BACKEND_UNSUPPORTED, StrataError, first_line
from strata_dagster.sql.content import row_source
from strata_dagster.sql.render import SNAPSHOT_SCHEMA

# Answers of at most this many rows are remembered for the connection's later identical questions.
_REMEMBERED_ROWS = 1000
# Set to print every statement sent to Spark (on stderr): what `strata compile` cannot show.
ECHO_ENV = "STRATA_SPARK_ECHO"
_MISSING = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND", "PATH_NOT_FOUND", "UNRESOLVED_ROUTINE")


class SparkError(WarehouseError):
    """Spark refused a statement; `str()` is its first message line, `error_class` Spark's class."""

    def __init__(self, message: str, error_class: str | None) -> None:
        super().__init__(message)
        self.error_class = error_class

    @property
    def is_missing_relation(self) -> bool:
        return self.error_class in _MISSING or any(marker in str(self) for marker in _MISSING)


@contextmanager
def spark_errors() -> Iterator[None]:
    try:
        yield
    except PySparkException as error:
        error_class = error.getCondition() if hasattr(error, "getCondition") else None
        raise SparkError(first_line(error), error_class) from None
    except Exception as error:  # py4j's own errors, a lost connection to Spark Connect
        if type(error).__module__.startswith(("py4j", "pyspark", "grpc")):
            raise SparkError(first_line(error), None) from None
        raise


def _plain(value: Any) -> Any:
    """Spark rows as DuckDB gives them: tuples of Python values, structs as dicts."""
    if isinstance(value, Row):
        return {key: _plain(item) for key, item in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class SparkResult:
    """The rows of one statement, read when first asked for (DDL has run already)."""

    def __init__(self, frame: Any, *, is_description: bool = False) -> None:
        self._frame = frame
        self._is_description = is_description
        self._rows: list[tuple[Any, ...]] | None = None

    def _all(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            with spark_errors():
                rows = [tuple(_plain(value) for value in row) for row in self._frame.collect()]
            if self._is_description:
                rows = [
                    (row[0], duckdb_type_name(row[1]), *row[2:])
                    for row in rows
                    if row[0] and not str(row[0]).startswith("#")
                ]
            self._rows = rows
        return self._rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._all())

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self._all()
        return rows[0] if rows else None


class _Rows(SparkResult):
    """Rows already read."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = list(rows)


class SparkConnection:
    """What `backends.sql.runner.run` talks to on Spark."""

    dialect = statements.DIALECT

    def __init__(self, spark: SparkSession, *, is_local: bool = False) -> None:
        self.spark = spark
        # A local Spark over a warehouse directory on this machine (not a Spark Connect client).
        self.is_local = is_local
        # Schemas this connection created (or found), and the snapshot schema's tables, read once.
        self.schemas: set[str] = set()
        self.snapshots: set[str] | None = None
        self._columns: dict[str, list[str]] = {}
        self._is_permanent = False
        self._described: dict[str, list[tuple[Any, ...]]] = {}
        self._answers: dict[str, list[tuple[Any, ...]]] = {}
        self._file_views: dict[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], str] = {}

    # -- statements -------------------------------------------------------------------------------
    def render(self, statement: exp.Expr) -> str:
        tree = statements.rewrite(statement, self._file_relation, self._row_columns)
        return tree.sql(dialect=statements.DIALECT)

    def _row_columns(self, select: exp.Select) -> list[str]:
        """The columns of the relation `select` reads as `__strata_row` (asked once per relation)."""
        source = row_source(select)
        assert source is not None, "a whole-row hash over no `__strata_row` relation"
        relation = statements.named_like(source).copy()
        # A table is asked as `describe` asks it (the answer a content read just had); a
        # subquery needs an alias.
        alias = (
            None if isinstance(relation, exp.Table) else exp.TableAlias(this=exp.to_identifier("__described"))
        )
        relation.set("alias", alias)
        probe = exp.Describe(this=exp.select("*").from_(relation))
        key = probe.sql(dialect="duckdb")
        if key not in self._columns:
            self._columns[key] = [str(row[0]) for row in self.run_statement(probe).fetchall()]
        return self._columns[key]

    def run_statement(
        self, statement: exp.Expr, params: Sequence[Any] | None = None, *, consume: bool = False
    ) -> SparkResult:
        del consume  # the rewrite always works on a copy
        if isinstance(statement, exp.Create) and statement.kind == "TABLE":
            if statement.args.get("replace"):
                # No CREATE OR REPLACE TABLE AS on Parquet: what replaces a table drops it first.
                self.sql(
                    exp.Drop(tables=[statement.this.copy()], kind="TABLE", exists=True).sql(dialect="spark")
                )
            result = self.sql(self.render(statements.snapshot_ddl(statement.copy())), params)
            target = statement.this
            if isinstance(target, exp.Table) and target.db == SNAPSHOT_SCHEMA and self.snapshots is not None:
                self.snapshots.add(target.name)
            return result
        if isinstance(statement, exp.Create) and statement.kind == "VIEW":
            self.forget_answers()
            self._is_permanent = True  # a permanent view cannot read a session's temporary view
            try:
                return self.sql(self.render(statement), params)
            finally:
                self._is_permanent = False
        if isinstance(statement, exp.Describe):
            # A relation's columns, asked for several times a run (its schema, its types, a
            # whole-row hash): once per connection, until a view is repointed or dropped.
            text = self.render(statement)
            if text not in self._described:
                query = statement.this
                if isinstance(query, exp.Query) and not params:
                    self._described[text] = self._query_columns(self.render(query))
                else:
                    self._described[text] = self.sql(text, params, is_description=True).fetchall()
            return _Rows(self._described[text])
        if isinstance(statement, exp.Alter | exp.Drop):
            self.forget_answers()
        if isinstance(statement, exp.Query) and not params:
            # The same question twice in a run (a source's figures: its fingerprint, then a
            # reader's window) gets the first answer, as inside a DuckDB transaction: snapshots
            # never change, and a run reads its sources as they were when it asked first.
            text = self.render(statement)
            if text in self._answers:
                return _Rows(self._answers[text])
            result = self.sql(text)
            rows = result.fetchall()
            if len(rows) <= _REMEMBERED_ROWS:
                self._answers[text] = rows
            return _Rows(rows)
        return self.sql(self.render(statement), params)

    def _query_columns(self, text: str) -> list[tuple[Any, ...]]:
        """(column, type as DuckDB spells it, comment) of a query, from its analysed schema: what
        `DESCRIBE <query>` answers (Spark describes the same analysed schema), without running a
        command and collecting its rows."""
        if os.environ.get(ECHO_ENV):
            print(f"spark> DESCRIBE {text}", file=sys.stderr)
        with spark_errors():
            fields = self.spark.sql(text).schema.fields
        return [
            (field.name, duckdb_type_name(field.dataType.simpleString()), field.metadata.get("comment"))
            for field in fields
        ]

    def forget_answers(self) -> None:
        """Views were repointed, dropped or created: what was read through them may differ now."""
        self._described.clear()
        self._answers.clear()

    def sql(
        self, text: str, params: Sequence[Any] | None = None, *, is_description: bool = False
    ) -> SparkResult:
        """Spark SQL text (built by the spark package from sqlglot trees) with `?` parameters."""
        if os.environ.get(ECHO_ENV):
            print(f"spark> {text}  {list(params or [])}", file=sys.stderr)
        with spark_errors():
            frame = self.spark.sql(text, args=list(params)) if params else self.spark.sql(text)
        return SparkResult(frame, is_description=is_description)

    def canonical_type(self, type_text: str) -> str:
        """A type as Spark spells it, then as DuckDB would (INT -> INTEGER, STRING -> VARCHAR)."""
        probe = exp.select(
            exp.func("typeof", exp.cast(exp.null(), exp.DataType.build(type_text, dialect="duckdb")))
        )
        row = self.run_statement(probe).fetchone()
        return duckdb_type_name(str(row[0])) if row else type_text

    # -- files ------------------------------------------------------------------------------------
    def _file_relation(self, node: exp.Table, reader: str) -> exp.Expr:
        """A DuckDB file read (`read_parquet('events/*/*.parquet', hive_partitioning = true)`) as
        a temporary view Spark's own reader made over the same files (once per connection)."""
        function = node.this
        paths: list[str] = []
        options: dict[str, str] = {}
        arguments = (
            [function.this, *function.expressions]
            if isinstance(function, exp.ReadParquet)
            else list(function.expressions)
        )
        if isinstance(function, exp.ReadParquet):
            arguments = list(function.expressions) or [function.this]
        for argument in arguments:
            if argument is None:
                continue
            if isinstance(argument, exp.Literal) and argument.is_string:
                paths.append(argument.this)
            elif isinstance(argument, exp.Array):
                paths.extend(item.this for item in argument.expressions if isinstance(item, exp.Literal))
            elif isinstance(argument, exp.EQ | exp.PropertyEQ):
                key = argument.this.name.lower()
                options[key] = argument.expression.sql().strip("'").lower()
        if self._is_permanent:
            return _native_file_relation(node, reader, paths, options)
        view = self._register(reader, tuple(paths), tuple(sorted(options.items())))
        relation = exp.Table(this=exp.to_identifier(view))
        alias = node.args.get("alias")
        if alias is not None:
            relation.set("alias", alias.copy())
        return relation

    def _register(self, reader: str, paths: tuple[str, ...], options: tuple[tuple[str, str], ...]) -> str:
        key = (reader, paths, options)
        if key in self._file_views:
            return self._file_views[key]
        name = "__strata_files_" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        spark_reader = self.spark.read.format(reader)
        if reader == "csv":
            spark_reader = spark_reader.option("header", "true").option("inferSchema", "true")
        if dict(options).get("hive_partitioning") == "true":
            spark_reader = spark_reader.option("basePath", _base_path(paths))
        with spark_errors():
            spark_reader.load(list(paths) if len(paths) != 1 else paths[0]).createOrReplaceTempView(name)
        self._file_views[key] = name
        return name

    def drop_file_views(self) -> None:
        for name in self._file_views.values():
            try:
                self.spark.catalog.dropTempView(name)
            except Exception:  # noqa: BLE001 - a session that is gone took its views with it
                pass
        self._file_views.clear()


def _native_file_relation(
    node: exp.Table, reader: str, paths: list[str], options: dict[str, str]
) -> exp.Expr:
    r"""Plain Parquet files as Spark SQL's own `parquet.\`path\`` (what a permanent view may read);
    anything that needs reader options cannot be read from a permanent view (E072)."""
    if reader != "parquet" or len(paths) != 1 or options.get("hive_partitioning") == "true":
        raise StrataError(
            E_BACKEND_UNSUPPORTED,
            f"a view over {reader} files ({', '.join(paths)}) cannot be created on Spark: a permanent "
            "view reads files only as plain Parquet",
            hint="drop `materialize: view` from the model reading them (build it as a table), or load the "
            "files into a table of the Spark catalog and read that",
        )
    relation = exp.Table(this=exp.to_identifier(paths[0], quoted=True), db=exp.to_identifier("parquet"))
    alias = node.args.get("alias")
    if alias is not None:
        relation.set("alias", alias.copy())
    return relation


_WILDCARD = re.compile(r"[*?\[{]")


def _base_path(paths: Sequence[str]) -> str:
    """The folder above the first `col=value/` level, where hive partition discovery starts."""
    bases = []
    for path in paths:
        parts = PurePosixPath(path).parts
        kept: list[str] = []
        for part in parts:
            if _WILDCARD.search(part) or "=" in part:
                break
            kept.append(part)
        bases.append(str(PurePosixPath(*kept)) if kept else ".")
    return min(bases, key=len)
