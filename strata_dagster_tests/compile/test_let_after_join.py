"""A `let` after a join: its column comes where the pipeline puts it (after the joined columns), in
the compiled columns and in the rows DuckDB builds alike, so set operations pair columns as written;
a window in such a `let` is refused (E008), as it would be computed before the join."""

import duckdb
import pytest

from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import make_module_project
from strata_dagster_tests.support.helpers import compile_text

TABLES = (
    "CREATE TABLE raw.orders AS SELECT * FROM (VALUES (1, 10, 5.0), (2, 20, 7.0), (3, 10, 1.0)) t(order_id, customer_id, amount)",
    "CREATE TABLE raw.customers AS SELECT * FROM (VALUES (10, 'north'), (20, 'south')) t(customer_id, region)",
    "CREATE TABLE raw.regions AS SELECT * FROM (VALUES ('north', 'N'), ('south', 'S')) t(region, code)",
)
SCHEMAS = {
    "orders": (("order_id", "INTEGER"), ("customer_id", "INTEGER"), ("amount", "DECIMAL(2,1)")),
    "customers": (("customer_id", "INTEGER"), ("region", "VARCHAR")),
    "regions": (("region", "VARCHAR"), ("code", "VARCHAR")),
}
SOURCES = "source orders {\n  table: raw.orders\n}\nsource customers {\n  table: raw.customers\n}\nsource regions {\n  table: raw.regions\n}\n"


def built_columns(warehouse, model):
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return tuple(row[0] for row in con.execute(f"DESCRIBE main.v_{model}").fetchall())


def test_the_let_column_comes_where_the_pipeline_puts_it_in_the_compiled_columns_and_the_rows(tmp_path):
    module = SOURCES + (
        "model m {\n  from orders\n  join left customers using (customer_id)\n  let doubled = amount * 2\n"
        "  join left regions using (region)\n  let tripled = amount * 3\n}\n"
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module, *TABLES)
    run_project(project, warehouse)
    expected = ("order_id", "customer_id", "amount", "region", "doubled", "code", "tripled")
    assert built_columns(warehouse, "m") == expected
    compiled = compile_text(module, schemas=SCHEMAS, with_sources=False)
    assert compiled.models["m"].columns == expected


def test_a_union_pairs_the_let_column_as_written(tmp_path):
    """The right side lists its columns in the pipeline's order: each value lands in its column
    (before, `doubled` was paired with `region`)."""
    module = SOURCES + (
        "model left_side {\n  from orders\n  join left customers using (customer_id)\n  let doubled = cast(amount * 2 as varchar)\n"
        "  union all right_side\n}\n"
        "model right_side {\n  from orders\n  select order_id, customer_id, amount, 'east' as region, 'x' as doubled\n}\n"
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module, *TABLES)
    run_project(project, warehouse)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        regions = sorted(
            row[0] for row in con.execute("SELECT DISTINCT region FROM main.v_left_side").fetchall()
        )
        doubled = sorted(
            row[0] for row in con.execute("SELECT DISTINCT doubled FROM main.v_left_side").fetchall()
        )
    assert regions == ["east", "north", "south"]
    assert doubled == ["10.0", "14.0", "2.0", "x"]


@pytest.mark.parametrize(
    ("steps", "line"),
    [
        (
            "  join inner customers using (customer_id)\n  let rn = row_number() over (order by order_id)\n",
            13,
        ),
        (
            "  let rn = row_number() over (order by order_id)\n  filter rn = 1\n  let again = count(*) over ()\n",
            14,
        ),
    ],
)
def test_a_window_in_a_let_after_a_join_or_a_filter_on_its_result_is_refused(steps, line):
    module = SOURCES + "model m {\n  from orders\n" + steps + "}\n"
    with pytest.raises(StrataError) as raised:
        compile_text(module, schemas=SCHEMAS, with_sources=False)
    error = raised.value.errors[0]
    assert error.code == "E008" and error.location.line == line, error.render()
    assert "computes a window after a join or a filter on its result" in error.message
    assert "use `derive" in error.hint


def test_a_window_in_a_let_before_a_join_is_still_computed_in_the_base_scan():
    module = SOURCES + (
        "model m {\n  from orders\n  let rn = row_number() over (order by order_id)\n"
        "  join left customers using (customer_id)\n}\n"
    )
    compiled = compile_text(module, schemas=SCHEMAS, with_sources=False)
    assert compiled.models["m"].columns == ("order_id", "customer_id", "amount", "rn", "region")


def test_steps_after_the_let_that_touch_its_column_build(tmp_path):
    """`expand` of the let's column and a `derive` replacing it read it from a new stage (the let
    is listed last by `* EXCLUDE`: excluding or replacing it again in the same star is refused)."""
    module = SOURCES + (
        "model expanded {\n  from orders\n  join left customers using (customer_id)\n"
        "  let labels = [cast(order_id as varchar), 'x']\n  expand labels as tag\n}\n"
        "model replaced {\n  from orders\n  join left customers using (customer_id)\n"
        "  let doubled = amount * 2\n  derive doubled = doubled + 1\n  join left regions using (region)\n}\n"
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module, *TABLES)
    run_project(project, warehouse)
    assert built_columns(warehouse, "expanded") == ("order_id", "customer_id", "amount", "region", "tag")
    assert built_columns(warehouse, "replaced") == (
        "order_id",
        "customer_id",
        "amount",
        "region",
        "doubled",
        "code",
    )
    with duckdb.connect(str(warehouse), read_only=True) as con:
        tags = con.execute("SELECT count(*), count(DISTINCT tag) FROM main.v_expanded").fetchone()
        doubled = con.execute("SELECT doubled FROM main.v_replaced ORDER BY order_id").fetchall()
    assert tags == (6, 4)
    assert [float(row[0]) for row in doubled] == [11.0, 15.0, 3.0]
    compiled = compile_text(module, schemas=SCHEMAS, with_sources=False)
    assert all(
        compiled.models[name].columns == built_columns(warehouse, name) for name in ("expanded", "replaced")
    )
