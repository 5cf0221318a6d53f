"""`strata check` has DuckDB bind every model's SQL against the sources' schemas, so what only
DuckDB's binder knows (a misspelled function, a type mismatch, an aggregate outside a grouping, a
window function in a filter) is E032 at the step DuckDB refuses, before any run, not at `strata run`."""

import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster_tests.support.engine_support import history_count, make_module_project

ORDERS = (
    "CREATE TABLE raw.orders AS SELECT i AS order_id, i % 7 AS customer_id, 'paid' AS status, "
    "CAST(i AS DECIMAL(12,2)) AS amount, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL 1 HOUR AS order_ts "
    "FROM range(20) t(i)"
)
SOURCE = "source orders {\n  table: raw.orders\n}\n\n"
DOWNSTREAM = "\nmodel downstream {\n  from stg\n}\n"


def check(project, warehouse):
    return CliRunner().invoke(main, ["check", str(project), "--warehouse", str(warehouse)])


@pytest.mark.parametrize(
    ("step", "said", "where"),
    [
        ("let day = sume(order_ts)", "Scalar Function with name sume does not exist", "m.strata:7:3"),
        (
            "derive odd = amount + status",
            "No function matches the given name and argument types",
            "m.strata:7:3",
        ),
        ("derive total = sum(amount)", "must appear in the GROUP BY clause", "m.strata:7:3"),
        ("filter row_number() over () = 1", "WHERE clause cannot contain window functions", "m.strata:7:3"),
        ("filter order_ts >= 2025-01-01", "Cannot compare values of type", "m.strata:7:3"),
    ],
)
def test_what_only_duckdb_binds_is_refused_by_check_at_its_step(tmp_path, step, said, where):
    module = SOURCE + f"model stg {{\n  from orders\n  {step}\n}}\n" + DOWNSTREAM
    project, warehouse = make_module_project(tmp_path, "m.strata", module, ORDERS)
    result = check(project, warehouse)
    assert result.exit_code == 1, result.output
    assert "error[E032]: DuckDB rejects model `stg`" in result.output and said in result.output, result.output
    assert where in result.output and "strata compile PROJECT --model stg" in result.output
    assert "model `downstream`" not in result.output  # not bound, as its input was refused
    # `strata run` refuses it the same way, publishing nothing.
    ran = CliRunner().invoke(main, ["run", str(project), "--warehouse", str(warehouse)])
    assert ran.exit_code == 1 and "error[E032]" in ran.output and history_count(warehouse) == 0


def test_every_refused_model_is_reported_in_one_check(tmp_path):
    module = (
        SOURCE
        + "model first {\n  from orders\n  derive a = nope(amount)\n}\n\n"
        + "model second {\n  from orders\n  derive b = status * 2\n}\n"
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module, ORDERS)
    result = check(project, warehouse)
    assert result.exit_code == 1
    assert "DuckDB rejects model `first`" in result.output and "m.strata:7:3" in result.output
    assert "DuckDB rejects model `second`" in result.output and "m.strata:12:3" in result.output


def test_check_says_how_many_models_duckdb_bound(tmp_path):
    module = SOURCE + "model stg {\n  from orders\n  derive doubled = amount * 2\n}\n" + DOWNSTREAM
    project, warehouse = make_module_project(tmp_path, "m.strata", module, ORDERS)
    result = check(project, warehouse)
    assert result.exit_code == 0, result.output
    assert "ok: 1 module, 1 source, 2 models; DuckDB binds all 2" in result.output
    # Without a warehouse the source's columns are not known: nothing is bound, nothing refused.
    unknown = check(project, tmp_path / "none.duckdb")
    assert unknown.exit_code == 0, unknown.output
    assert "DuckDB binds none of them (they read a table whose columns only a run knows" in unknown.output


def test_what_the_warehouse_defines_binds_as_in_a_run(tmp_path):
    """A macro, an enum type, a table a subquery names: check binds on the warehouse itself (read-only,
    its tables temporary), so they resolve as they do in a run."""
    module = (
        SOURCE
        + "model stg {\n  from orders\n  derive cents = to_cents(amount), mood = 'ok'::mood\n"
        + "  filter customer_id in (select customer_id from main.vip)\n}\n"
    )
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        module,
        ORDERS,
        "CREATE TABLE main.vip AS SELECT 3 AS customer_id",
        "CREATE MACRO to_cents(x) AS CAST(x * 100 AS BIGINT)",
        "CREATE TYPE mood AS ENUM ('ok', 'sad')",
    )
    result = check(project, warehouse)
    assert result.exit_code == 0, result.output
    assert "DuckDB binds it" in result.output
    ran = CliRunner().invoke(main, ["run", str(project), "--warehouse", str(warehouse)])
    assert ran.exit_code == 0, ran.output


def test_a_subquery_naming_a_table_that_is_not_there_is_left_to_the_run(tmp_path):
    """The compiler lets a subquery name a warehouse table directly (docs/language.md, section 8):
    one that is not there is not a binding error of the model's own SQL; the run says E032."""
    module = (
        SOURCE + "model stg {\n  from orders\n  filter customer_id in (select customer_id from main.vip)\n}\n"
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module, ORDERS)
    result = check(project, warehouse)
    assert result.exit_code == 0, result.output
    assert "DuckDB binds none of them" in result.output
    ran = CliRunner().invoke(main, ["run", str(project), "--warehouse", str(warehouse)])
    assert ran.exit_code == 1 and "error[E032]" in ran.output


def test_file_sources_and_every_type_of_a_source_are_bound(tmp_path):
    types = (
        "CREATE TABLE raw.wide AS SELECT 1 AS id, [1, 2] AS tags, {'a': 1, 'b c': 'x'} AS nested, "
        "MAP {'k': 1} AS mapping, uuid() AS token, 1::HUGEINT AS big, INTERVAL 1 DAY AS span, "
        "TIMESTAMP_NS '2025-01-01' AS precise, 'x'::BLOB AS raw_bytes"
    )
    module = (
        "source wide {\n  table: raw.wide\n}\n\nsource drops {\n  path: 'drops.csv'\n}\n\n"
        "model joined {\n  from wide\n  join left drops on wide.id = drops.id\n"
        "  select wide.id, tags, nested, mapping, token, big, span, precise, raw_bytes, drops.label\n}\n"
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module, types)
    (project / "drops.csv").write_text("id,label\n1,one\n")
    result = check(project, warehouse)
    assert result.exit_code == 0, result.output
    assert "ok: 1 module, 2 sources, 1 model; DuckDB binds it" in result.output
