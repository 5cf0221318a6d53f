"""The dialect conformance table (issue 15 item 6): every construct of spark_conformance_cases runs
on DuckDB and, rewritten by `to_spark`, on Spark, over the same rows; the rows are compared as
multisets of normalised values (numbers to 12 significant digits, timestamps in UTC, NULLs), and
the outcome is written to docs/spark_dialect.md. The committed file must equal what the run
generates; STRATA_WRITE_DOCS=1 rewrites it.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import os
import re
from collections import Counter
from decimal import Decimal

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from strata_dagster.backends.dialect_check import check_engine
from strata_dagster.backends.spark.dialect.functions import SPARK_FUNCTIONS
from strata_dagster.backends.spark.dialect.translate import EngineDialectError, to_spark
from strata_dagster.compile.relations import bind
from strata_dagster_tests.conftest import CUSTOMERS_COLUMNS, ORDERS_COLUMNS
from strata_dagster_tests.support.helpers import SCHEMAS, compile_text
from strata_dagster_tests.support.paths import REPO
from strata_dagster_tests.support.spark_conformance_cases import CASES, CUSTOMERS, ORDERS, Case

DOC = REPO / "docs" / "spark_dialect.md"
TABLES = {"orders": (ORDERS_COLUMNS, ORDERS), "customers": (CUSTOMERS_COLUMNS, CUSTOMERS)}
RAW_SCHEMA = {f"raw.{name}": dict(columns) for name, (columns, _) in TABLES.items()}
SECTIONS = {
    "steps": "Pipeline steps",
    "expressions": "Expressions: numbers, strings, lists",
    "dates": "Dates and times",
    "aggregates": "Aggregates",
    "engine": "Engine statements (built with sqlglot, not written in a model)",
}


def _literal(value: object, kind: str) -> exp.Expression:
    if value is None:
        node: exp.Expression = exp.Null()
    elif isinstance(value, list):
        node = exp.Array(expressions=[_literal(item, kind.removesuffix("[]")) for item in value])
    elif isinstance(value, (int, Decimal)):
        node = exp.Literal.number(str(value))
    else:
        node = exp.Literal.string(str(value))
    return exp.Cast(this=node, to=exp.DataType.build(kind, dialect="duckdb"))


def _rows_query(columns, rows) -> exp.Query:
    selects = [
        exp.select(
            *(
                exp.alias_(_literal(value, kind), name)
                for value, (name, kind) in zip(row, columns, strict=True)
            )
        )
        for row in rows
    ]
    query: exp.Query = selects[0]
    for select in selects[1:]:
        query = exp.union(query, select, distinct=False)
    return query


def _create_tables(run_sql, dialect: str) -> None:
    run_sql(exp.Create(this=exp.to_identifier("raw"), kind="SCHEMA", exists=True).sql(dialect=dialect))
    for name, (columns, rows) in TABLES.items():
        create = exp.Create(
            this=exp.table_(name, db="raw"), kind="TABLE", expression=_rows_query(columns, rows)
        )
        if dialect == "spark":
            create.set(
                "properties", exp.Properties(expressions=[exp.FileFormatProperty(this=exp.var("PARQUET"))])
            )
        run_sql(create.sql(dialect=dialect))


def _normalised(value: object) -> object:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return _number(Decimal(f"{value:.12g}"))
    if isinstance(value, (int, Decimal)):
        return _number(Decimal(value))
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return ("timestamp", value.isoformat())
    if isinstance(value, dt.date):
        return ("date", value.isoformat())
    if isinstance(value, dt.timedelta):
        return ("interval", value // dt.timedelta(microseconds=1))
    if isinstance(value, dict):
        return tuple(_normalised(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return tuple(_normalised(item) for item in value)
    return repr(value)


def _number(value: Decimal) -> str:
    rounded = Decimal(f"{value:.12g}") if value.adjusted() >= 12 else value
    text = f"{rounded.normalize():f}"
    return "0" if text in ("-0", "0") else text


def _multiset(rows) -> Counter:
    return Counter(repr(tuple(_normalised(value) for value in row)) for row in rows)


def _role_binding(statements: dict[str, exp.Expression]):
    """Sources read as raw.<name>; a helper model as its own (bound) statement, as a subquery."""

    def relation(name: str):
        if name in statements:
            return bind(statements[name], relation)
        return exp.table_(name, db="raw")

    return relation


def _statements(case: Case) -> tuple[exp.Expression, exp.Expression | EngineDialectError]:
    if case.section == "engine":
        duck = sqlglot.parse_one(case.body, read="duckdb")
        try:
            return duck, to_spark(duck, RAW_SCHEMA)
        except EngineDialectError as refusal:
            return duck, refusal
    body = "\n".join(f"  {line}" for line in case.body.splitlines())
    compiled = compile_text(f"model m {{\n{body}\n}}\n{case.helpers}\n")
    duck_statements = {name: model.statement for name, model in compiled.models.items()}
    duck = bind(duck_statements["m"], _role_binding(duck_statements))
    try:
        check_engine(compiled, "spark", SCHEMAS, strict=True)
    except EngineDialectError as refusal:
        assert refusal.location is not None and refusal.location.file == "m.strata", refusal.render()
        return duck, refusal
    # Bound first (helper models as subqueries, with their own CTEs), then rewritten as a whole.
    return duck, to_spark(duck, RAW_SCHEMA)


def _family(kind: str) -> str:
    kind = kind.lower()
    for family, words in (
        ("list", ("[]", "array")),
        ("struct", ("struct",)),
        ("interval", ("interval",)),
        ("timestamp", ("timestamp",)),
        ("date", ("date",)),
        ("decimal", ("decimal",)),
        ("float", ("double", "float", "real")),
        ("integer", ("int", "long", "short", "byte")),
        ("text", ("varchar", "string")),
        ("boolean", ("bool",)),
    ):
        if any(word in kind for word in words):
            return family
    return "null" if kind in ("null", "void", '"null"') else kind


def _outcome(case: Case, duck_con, spark, duck: exp.Expression, spark_statement) -> str:
    if isinstance(spark_statement, EngineDialectError):
        return "refused (E070)"
    try:
        relation = duck_con.sql(duck.sql(dialect="duckdb"))
        duck_rows, duck_names, duck_types = (
            relation.fetchall(),
            relation.columns,
            [str(t) for t in relation.types],
        )
    except duckdb.Error as error:
        return f"fails on DuckDB: {str(error).splitlines()[0]}"
    try:
        frame = spark.sql(spark_statement.sql(dialect="spark"))
        spark_rows = [tuple(row) for row in frame.collect()]
    except Exception as error:  # pyspark raises its own classes, imported only inside the Spark tier
        return f"fails on Spark: {str(error).strip().splitlines()[0]}"
    spark_names = frame.columns
    spark_types = [field.dataType.simpleString() for field in frame.schema.fields]
    if list(duck_names) != list(spark_names):
        return f"differs: columns {list(duck_names)} vs {list(spark_names)}"
    families = [(_family(a), _family(b)) for a, b in zip(duck_types, spark_types, strict=True)]
    mismatched = [
        f"{name} {a} vs {b}"
        for name, (a, b) in zip(duck_names, families, strict=True)
        if a != b and "null" not in (a, b)
    ]
    if mismatched:
        return f"differs: types {', '.join(mismatched)}"
    if _multiset(duck_rows) != _multiset(spark_rows):
        only_duck = _multiset(duck_rows) - _multiset(spark_rows)
        only_spark = _multiset(spark_rows) - _multiset(duck_rows)
        return f"differs: rows only in DuckDB {sorted(only_duck)[:2]}, only in Spark {sorted(only_spark)[:2]}"
    return "same rows"


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = {"ORDER", "GROUP", "SELECT", "FROM", "WHERE", "TABLE", "RANGE", "DATE", "TIMESTAMP", "USING"}


def _display(node: exp.Expression, dialect: str) -> str:
    shown = node.copy()
    for identifier in shown.find_all(exp.Identifier):
        if _PLAIN.fullmatch(identifier.name) and identifier.name.upper() not in _RESERVED:
            identifier.set("quoted", False)
    return shown.sql(dialect=dialect)


def _fragment(statement: exp.Expression, probe: str | None) -> exp.Expression:
    """The expression computing `probe` (not a later stage passing it on), else the statement."""
    if probe is None:
        return statement
    found = [alias.this for alias in statement.find_all(exp.Alias) if alias.alias == probe]
    computed = [node for node in found if not isinstance(node, exp.Column)]
    return (computed or found or [statement])[0]


def _cell(text: str) -> str:
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>" if text else ""


def _model_cell(case: Case) -> str:
    if case.section == "engine":
        return ""
    return "<br>".join(_cell(line) for line in case.body.splitlines())


def _doc(rows: list[tuple[Case, str, str, str]]) -> str:
    lines = [
        "# The Spark dialect: each construct on DuckDB and on Spark",
        "",
        "Generated by `strata_dagster_tests/backends/spark/test_spark_dialect_conformance.py`; do not edit by hand",
        "(`STRATA_WRITE_DOCS=1` regenerates it). Each construct is a tiny model over a few rows of",
        "`orders` and `customers` (NULLs, empty and NULL lists, ties, month ends), compiled by strata,",
        "run on DuckDB, rewritten for Spark by `strata_dagster.backends.spark.dialect.translate.to_spark` and run on",
        "a local Spark 4 over the same rows. The rows are compared as multisets: numbers to 12",
        "significant digits, timestamps in UTC, NULLs as NULLs; the column names and the type family",
        "(integer, decimal, float, text, date, timestamp, list, ...) must match too.",
        "",
        "- **same rows**: both backends return the same rows.",
        "- **refused (E070)**: `strata check --backend spark` refuses the construct, at its file:line:col,",
        "  with a hint; the run never reaches Spark.",
        "- **differs**: a known difference, said in the row: not rewritten and not refused.",
        "",
        "The SQL shown is the construct's expression (the whole statement for steps); Spark identifiers",
        "are shown unquoted where they need no quotes.",
    ]
    for section, title in SECTIONS.items():
        lines += [
            "",
            f"## {title}",
            "",
            "| construct | model | DuckDB SQL | Spark SQL | result |",
            "| --- | --- | --- | --- | --- |",
        ]
        for case, duck_sql, spark_sql, outcome in rows:
            if case.section == section or (section == "expressions" and case.section == "refused"):
                lines.append(
                    f"| {html.escape(case.construct).replace('|', '&#124;')} | {_model_cell(case)} | "
                    f"{_cell(duck_sql)} | {_cell(spark_sql)} | {outcome} |"
                )
    return "\n".join(lines) + "\n"


def _expected(case: Case, outcome: str) -> bool:
    if case.expect == "same":
        return outcome == "same rows"
    if case.expect == "refused":
        return outcome == "refused (E070)"
    return outcome.startswith("differs")


def test_spark_function_list_is_sparks(spark):
    """Every name the rewrite lets through as a Spark function is one the running Spark knows."""
    known = {row[0] for row in spark.sql("SHOW FUNCTIONS").collect()}
    assert SPARK_FUNCTIONS <= known, sorted(SPARK_FUNCTIONS - known)


def test_dialect_conformance_table(clean_spark):
    spark = clean_spark
    duck_con = duckdb.connect()
    _create_tables(duck_con.execute, "duckdb")
    _create_tables(spark.sql, "spark")
    rows: list[tuple[Case, str, str, str]] = []
    unexpected: list[str] = []
    for case in CASES:
        duck, spark_statement = _statements(case)
        outcome = _outcome(case, duck_con, spark, duck, spark_statement)
        if case.expect == "differs" and outcome.startswith("differs"):
            outcome = f"differs: {case.note}"
        if not _expected(case, outcome):
            unexpected.append(f"{case.construct}: expected {case.expect}, got {outcome}")
        duck_sql = _display(_fragment(duck, case.probe), "duckdb")
        spark_sql = (
            ""
            if isinstance(spark_statement, EngineDialectError)
            else _display(_fragment(spark_statement, case.probe), "spark")
        )
        rows.append((case, duck_sql, spark_sql, outcome))
    duck_con.close()
    assert not unexpected, "\n".join(unexpected)
    text = _doc(rows)
    if os.environ.get("STRATA_WRITE_DOCS") == "1":
        DOC.write_text(text)
    assert DOC.exists(), f"missing {DOC.name}: run with STRATA_WRITE_DOCS=1"
    assert DOC.read_text() == text, (
        f"{DOC.name} is not what the run generates: run with STRATA_WRITE_DOCS=1 and review the diff"
    )


@pytest.mark.parametrize(
    "case", [case for case in CASES if case.expect == "refused"], ids=lambda case: case.construct
)
def test_refused_constructs_are_e070_without_spark(case):
    """The refusals are made at compile time, with no Spark session."""
    _, spark_statement = _statements(case)
    assert isinstance(spark_statement, EngineDialectError)
    assert spark_statement.code == "E070"
