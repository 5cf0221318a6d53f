"""The Spark rewrite without Spark: golden input/expected SQL per rule, the golden models as Spark
SQL, one E070 test per refused construct (with its file:line:col), and `--engine` on the CLI.

Regenerate the golden files after an intended change with STRATA_UPDATE_GOLDEN=1 and review the
diff; whether the rewritten SQL returns DuckDB's rows on Spark is the conformance test's job
(test_spark_dialect_conformance, in the Spark tier).
"""

import os
from pathlib import Path

import pytest
import sqlglot
from click.testing import CliRunner

from strata_dagster.backends.dialect_check import check_engine, spark_relation
from strata_dagster.backends.spark.dialect.translate import EngineDialectError, to_spark
from strata_dagster.cli.main import main
from strata_dagster.compile.relations import bind
from strata_dagster.errors import StrataError
from strata_dagster_tests.conftest import CUSTOMERS_COLUMNS, ORDERS_COLUMNS
from strata_dagster_tests.support.helpers import SCHEMAS, compile_text
from strata_dagster_tests.support.paths import GOLDEN

GOLDEN = GOLDEN
RULES = GOLDEN / "spark"
SCHEMA = {"raw.orders": dict(ORDERS_COLUMNS), "raw.customers": dict(CUSTOMERS_COLUMNS)}
RULE_CASES = sorted(path.name.removesuffix(".duckdb.sql") for path in RULES.glob("*.duckdb.sql"))
MODEL_CASES = sorted(path.stem for path in GOLDEN.glob("*.strata"))


def _golden(path: Path, actual: str) -> str:
    """The golden text stored at `path` (first rewritten from `actual` under STRATA_UPDATE_GOLDEN=1,
    whose diff is then the review)."""
    if os.environ.get("STRATA_UPDATE_GOLDEN"):
        path.write_text(actual)
    assert path.exists(), f"missing {path.name}: run with STRATA_UPDATE_GOLDEN=1"
    return path.read_text()


@pytest.mark.parametrize("stem", RULE_CASES)
def test_spark_rule_golden(stem):
    """Each rule: a DuckDB statement over raw.orders / raw.customers and the Spark SQL it becomes."""
    statement = sqlglot.parse_one((RULES / f"{stem}.duckdb.sql").read_text(), read="duckdb")
    spark_sql = to_spark(statement, SCHEMA).sql(dialect="spark", pretty=True) + ";\n"
    assert spark_sql == _golden(RULES / f"{stem}.spark.sql", spark_sql)


@pytest.mark.parametrize("stem", MODEL_CASES)
def test_golden_models_as_spark_sql(stem):
    """Every golden model, as `strata compile --engine spark` prints it."""
    compiled = compile_text((GOLDEN / f"{stem}.strata").read_text())
    statements = check_engine(compiled, "spark", SCHEMAS, strict=True)
    local = [
        name for name in compiled.project.order if compiled.project.module_of(name).path.name == "m.strata"
    ]
    parts = []
    for name in local:
        bound = bind(statements[name], lambda relation: spark_relation(compiled.project, relation))
        parts.append(f"-- model {name}\n{bound.sql(dialect='spark', pretty=True)};\n")
    spark_sql = "\n".join(parts)
    assert spark_sql == _golden(RULES / f"model_{stem}.spark.sql", spark_sql)


# Each refused construct, written in a model, and the column its E070 must point at: line 3 is
# the `derive v = ...` line below, whose expression starts at column 14; a construct whose own
# position sqlglot does not keep (a cast, a window) is pointed at the first position inside it.
REFUSED = {
    "hash": ("hash(order_id, status)", 14),
    "regexp_replace_first_match": ("status || regexp_replace(status, 'a', 'A')", 24),
    "date_sub_month": ("date_sub('month', order_ts, updated_at)", 14),
    "cast_hugeint": ("cast(order_id as hugeint)", 19),
    "cast_time": ("cast(order_ts as time)", 19),
    "format_braces": ("format('{}', order_id)", 14),
    "glob": ("status glob 'p*'", 14),
    "similar_to": ("status similar to 'p.*'", 14),
    "list_slice": ("tags[1:2]", 14),
    "unknown_function": ("1 + list_aggregate(tags, 'count')", 18),
    "strftime_directive": ("strftime(order_ts, '%j')", 14),
    "strftime_letters": ("strftime(order_ts, 'day %d')", 14),
    "strftime_computed_format": ("strftime(order_ts, status)", 14),
    "date_trunc_decade": ("date_trunc('decade', order_ts)", 14),
    "date_part_computed": ("date_part(status, order_ts)", 14),
    "date_part_unknown": ("date_part('julian', order_ts)", 14),
    "date_diff_unit": ("date_diff('decade', order_ts, updated_at)", 14),
    "regexp_options": ("regexp_matches(status, 'a', 's')", 14),
    "regexp_replace_computed": ("regexp_replace(status, 'a', status, 'g')", 14),
    "lambda_index": ("list_transform(tags, (x, i) -> x || i)", 14),
    "range_computed_step": ("range(0, 10, order_id)", 14),
    "quantile_timestamp": ("quantile_cont(order_ts, 0.5) over ()", 28),
    "quantile_disc_list": ("quantile_disc(order_id, [0.5, 0.9]) over ()", 28),
    "distinct_window": ("count(distinct status) over (partition by customer_id)", 14),
    "list_distinct_ordered": ("list(distinct status order by status) over ()", 14),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_construct_is_e070_at_its_place(name):
    expression, column = REFUSED[name]
    compiled = compile_text(f"model m {{\n  from orders\n  derive v = {expression}\n}}\n")
    with pytest.raises(EngineDialectError) as raised:
        check_engine(compiled, "spark", SCHEMAS)
    error = raised.value
    assert error.code == "E070"
    assert (error.location.file, error.location.line, error.location.column) == ("m.strata", 3, column)
    assert "spark" in error.message and "model `m`" in error.message and error.hint


def test_distinct_on_is_refused():
    with pytest.raises(EngineDialectError):
        to_spark(
            sqlglot.parse_one("SELECT DISTINCT ON (customer_id) * FROM raw.orders", read="duckdb"), SCHEMA
        )


def test_the_same_project_passes_on_duckdb():
    """Refusals are the Spark engine's: on DuckDB the project is fine."""
    compiled = compile_text("model m {\n  from orders\n  derive v = hash(order_id)\n}\n")
    assert set(check_engine(compiled, "duckdb", SCHEMAS)) == {"m"}


def test_every_refusal_is_reported_together():
    compiled = compile_text(
        "model m {\n  from orders\n  derive v = hash(order_id)\n}\nmodel n {\n  from orders\n  filter status glob 'p*'\n}\n"
    )
    with pytest.raises(StrataError) as raised:
        check_engine(compiled, "spark", SCHEMAS)
    assert [error.code for error in raised.value.errors] == ["E070", "E070"]
    assert [error.location.line for error in raised.value.errors] == [3, 7]


def test_using_join_over_unknown_columns_needs_the_schema():
    """`join ... using` under `*`: Spark orders the columns otherwise, and without the inputs'
    columns the stars cannot be expanded. `check` lets it pass (the engine knows the columns at
    run time); a strict check (`compile --engine spark`) and `to_spark` refuse it."""
    text = "model m {\n  from orders\n  join left customers using (customer_id)\n}\n"
    compiled = compile_text(text, schemas={})
    assert check_engine(compiled, "spark", {}) == {"m": None}
    with pytest.raises(EngineDialectError) as raised:
        check_engine(compiled, "spark", {}, strict=True)
    assert raised.value.needs_schema and raised.value.code == "E070"
    with pytest.raises(EngineDialectError):
        to_spark(compiled.models["m"].statement)
    assert check_engine(compile_text(text), "spark", SCHEMAS)["m"] is not None


def test_unknown_engine_is_refused():
    with pytest.raises(StrataError) as raised:
        check_engine(compile_text("model m { from orders }\n"), "postgres", SCHEMAS)
    assert raised.value.code == "E070"


def _project(tmp_path, derive: str) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    (project / "m.strata").write_text(
        "source orders {\n  path: 'o.csv'\n}\n\nmodel m {\n  from orders\n"
        + f"  derive v = {derive}\n"
        + "}\n"
    )
    (project / "o.csv").write_text("order_id,status\n1,paid\n")
    return project


def test_cli_check_engine_spark_refuses_with_e070(tmp_path):
    project = _project(tmp_path, "hash(order_id)")
    warehouse = tmp_path / "absent.duckdb"
    assert CliRunner().invoke(main, ["check", str(project), "--warehouse", str(warehouse)]).exit_code == 0
    result = CliRunner().invoke(
        main, ["check", str(project), "--warehouse", str(warehouse), "--engine", "spark"]
    )
    assert result.exit_code == 1
    assert "error[E070]" in result.output and "m.strata:7:14" in result.output
    from_env = CliRunner().invoke(
        main, ["check", str(project), "--warehouse", str(warehouse)], env={"STRATA_ENGINE": "spark"}
    )
    assert from_env.exit_code == 1 and "error[E070]" in from_env.output
    assert not warehouse.exists()


def test_cli_compile_engine_spark_prints_spark_sql(tmp_path):
    project = _project(tmp_path, "dayofweek(cast('2026-01-04' as date)) + 1/0")
    args = ["compile", str(project), "--warehouse", str(tmp_path / "absent.duckdb"), "--model", "m"]
    duck = CliRunner().invoke(main, args)
    spark = CliRunner().invoke(main, [*args, "--engine", "spark"])
    assert duck.exit_code == 0 and spark.exit_code == 0, spark.output
    assert "DAYOFWEEK(CAST('2026-01-04' AS DATE))" in duck.output and "READ_CSV_AUTO" in duck.output
    assert "DAYOFWEEK(CAST('2026-01-04' AS DATE)) - 1" in spark.output
    assert "TRY_DIVIDE" in spark.output and "csv.`" in spark.output


def test_cli_bad_engine_environment_is_e071(tmp_path):
    project = _project(tmp_path, "1")
    result = CliRunner().invoke(main, ["check", str(project)], env={"STRATA_ENGINE": "oracle"})
    assert result.exit_code == 1 and "error[E071]" in result.output


def test_a_whole_row_hash_is_named_like_the_relation_a_filtering_subquery_reads():
    """The columns of `SELECT * FROM r WHERE ...` (and of a UNION ALL, by its first branch) are r's:
    Spark describes r (cached per run) instead of analysing the whole replaced-rows query."""
    from strata_dagster.backends.spark.statements import named_like

    def named(text: str) -> str:
        return named_like(sqlglot.parse_one(text, read="duckdb").subquery("__strata_row")).sql()

    replaced = (
        "SELECT * FROM (SELECT * FROM s.a AS __seg WHERE NOT EXISTS (SELECT 1 FROM k) UNION ALL "
        "SELECT * FROM s.b AS __seg) AS __before WHERE __before.x IN (SELECT x FROM k)"
    )
    assert named(replaced) == "s.a AS __seg"
    assert named("SELECT * FROM s.t WHERE a > 1") == "s.t"
    for kept in (
        "SELECT * EXCLUDE (a) FROM s.t",
        "SELECT a FROM s.t",
        "SELECT *, 1 AS b FROM s.t",
        "SELECT * FROM s.t JOIN s.u USING (a)",
        "SELECT DISTINCT * FROM s.t",
        "SELECT * FROM s.t GROUP BY ALL",
        "WITH c AS (SELECT 1 AS a) SELECT * FROM c",
    ):
        assert named(kept).startswith("("), kept  # its columns are its own: described as it is
