"""Model unit tests (`test` blocks, `strata test`): passing and failing cases with their diff and
file:line, incremental steps, every error code, and a warehouse that stays byte for byte the same."""

import json
import textwrap
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster.engine.commands.unit_tests import run_unit_tests
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project
from strata_dagster_tests.support.dagster_support import warehouse_digest
from strata_dagster_tests.support.engine_support import SHOP, SHOP_MODELS, make_shop

SOURCES = """\
source orders { table: raw.orders }
source customers { table: raw.customers }
"""

MODELS = """\
model paid {
  from orders
  filter status = 'paid'
  select order_id, customer_id, amount
}

model latest {
  from orders
  filter status <> 'cancelled'
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}

model log {
  from orders
  select order_id, status, updated_at
  incremental
  merge_strategy: append
  cdc_column: updated_at
}

model first_seen {
  from orders
  select order_id, amount, updated_at
  incremental
  merge_strategy: append_new
  merge_keys: [order_id]
  cdc_column: updated_at
}

model keyed {
  from orders
  derive k = order_id * 10
  incremental
  merge_strategy: upsert
  merge_keys: [k]
  cdc_column: updated_at
}

model sorted_paid {
  from paid
  order_by: [order_id]
}
"""


def project(tmp_path: Path, tests: str, *, models: str = MODELS) -> Path:
    folder = tmp_path / "project"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sources.strata").write_text(SOURCES)
    (folder / "models.strata").write_text(models)
    (folder / "tests.strata").write_text(textwrap.dedent(tests))
    return folder


def warehouse(tmp_path: Path) -> Path:
    """Typed source tables with a couple of rows (the rows never matter to a unit test)."""
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE SCHEMA raw")
    con.execute(
        "CREATE TABLE raw.orders (order_id BIGINT, customer_id BIGINT, status VARCHAR, "
        "amount DECIMAL(12,2), order_ts TIMESTAMP, updated_at TIMESTAMP)"
    )
    con.execute("INSERT INTO raw.orders VALUES (1, 1, 'paid', 1.00, now(), now())")
    con.execute("CREATE TABLE raw.customers (customer_id BIGINT, region VARCHAR)")
    con.close()
    return path


def run(folder: Path, wh: Path, *args: str):
    """`strata test`, with `--warehouse wh` when it exists (else without one: a given warehouse
    that does not exist is E020)."""
    warehouse = ["--warehouse", str(wh)] if wh.exists() else []
    return CliRunner().invoke(main, ["test", str(folder), *warehouse, *args])


def error_of(folder: Path, wh: Path) -> StrataError:
    with pytest.raises(StrataError) as caught:
        run_unit_tests(folder, wh)
    return caught.value


PAID_PASSES = """\
test paid keeps_paid_orders {
  given orders [
    (order_id, status,      amount)
    (1,        'paid',      10.50)
    (2,        'cancelled', 3.00)
  ]
  expect [(order_id, amount, customer_id) (1, 10.50, null)]
}
"""

PAID_FAILS = """\
test paid keeps_paid_orders {
  given orders [
    (order_id, status,      amount)
    (1,        'paid',      10.50)
    (2,        'cancelled', 3.00)
  ]
  expect [
    (order_id, amount)
    (1,        10.50)
    (2,        3.00)
  ]
}
"""


def test_a_passing_case_exits_0_and_the_columns_not_given_are_null(tmp_path):
    folder, wh = project(tmp_path, PAID_PASSES), warehouse(tmp_path)
    result = run(folder, wh)
    assert result.exit_code == 0, result.output
    assert "keeps_paid_orders" in result.output and "1 passed, 0 failed" in result.output


def test_a_failing_case_prints_the_row_diff_with_file_and_line(tmp_path):
    folder, wh = (
        project(
            tmp_path,
            PAID_FAILS.replace("(1,        'paid',      10.50)", "(1, 'paid', 10.50)\n    (3, 'paid', 7.00)"),
        ),
        warehouse(tmp_path),
    )
    result = run(folder, wh)
    assert result.exit_code == 1
    tests_file = folder / "tests.strata"
    assert f"FAIL paid.keeps_paid_orders at {tests_file}:1:1" in result.output
    # The expected row the model does not give, with the line it is written on.
    assert f"- (2, 3.00)  expected at {tests_file}:11:5, not given" in result.output
    assert "+ (3, 7.00)  given by the model, not expected" in result.output
    assert "0 passed, 1 failed" in result.output
    report = json.loads(run(folder, wh, "--json").output)
    assert (report["passed"], report["failed"]) == (0, 1)
    case = report["tests"][0]
    assert case["missing"] == [{"values": ["2", "3.00"], "location": f"{tests_file}:11:5"}]
    assert case["unexpected"] == [{"values": ["3", "7.00"]}]


def test_order_matters_only_for_a_model_with_order_by(tmp_path):
    tests = """\
    test paid any_order {
      given orders [(order_id, status) (1, 'paid') (2, 'paid')]
      expect [(order_id) (2) (1)]
    }
    test sorted_paid in_order {
      given paid [(order_id) (2) (1)]
      expect [(order_id) (1) (2)]
    }
    test sorted_paid out_of_order {
      given paid [(order_id) (2) (1)]
      expect [(order_id) (2) (1)]
    }
    """
    folder, wh = project(tmp_path, tests), warehouse(tmp_path)
    report = run_unit_tests(folder, wh)
    assert [(r.name, r.is_passed) for r in report.results] == [
        ("any_order", True),
        ("in_order", True),
        ("out_of_order", False),
    ]
    failed = report.failed[0]
    assert not failed.missing and not failed.unexpected
    assert [row.values for row in failed.actual_order] == [("1",), ("2",)]


STEPS = """\
test latest upsert_step {
  previous [
    (order_id, status,   amount)
    (1,        'paid',   10.00)
    (2,        'paid',   20.00)
    (4,        'placed', 40.00)
  ]
  given orders [
    (order_id, status,      amount, updated_at)
    (1,        'cancelled', 10.00,  timestamp '2025-01-05 10:00:00')
    (2,        'shipped',   21.00,  timestamp '2025-01-05 11:00:00')
    (3,        'paid',      30.00,  timestamp '2025-01-05 12:00:00')
  ]
  expect [
    (order_id, status,    amount)
    (2,        'shipped', 21.00)
    (3,        'paid',    30.00)
    (4,        'placed',  40.00)
  ]
}
test log append_step {
  previous [(order_id, status) (1, 'placed')]
  given orders [
    (order_id, status, updated_at)
    (1,        'paid', timestamp '2025-01-05 10:00:00')
    (1,        'paid', timestamp '2025-01-05 10:00:00')
  ]
  expect [(order_id, status) (1, 'placed') (1, 'paid') (1, 'paid')]
}
test first_seen append_new_step {
  previous [(order_id, amount) (1, 10.00)]
  given orders [(order_id, amount, updated_at) (1, 99.00, null) (2, 20.00, null)]
  expect [(order_id, amount) (1, 10.00) (2, 20.00)]
}
"""


@pytest.mark.parametrize("with_warehouse", [True, False])
def test_incremental_steps_merge_the_delta_as_the_engine_does(tmp_path, with_warehouse):
    # Without a warehouse the sources' columns are the fixtures' (and the upsert still takes the
    # changed keys from the raw rows: order 1, cancelled since, leaves the state).
    folder = project(tmp_path, STEPS)
    wh = warehouse(tmp_path) if with_warehouse else tmp_path / "absent.duckdb"
    report = run_unit_tests(folder, wh)
    assert [(r.name, r.kind, r.is_passed) for r in report.results] == [
        ("upsert_step", "incremental step", True),
        ("append_step", "incremental step", True),
        ("append_new_step", "incremental step", True),
    ], [r.as_json() for r in report.failed]
    assert not wh.exists() or with_warehouse


def test_a_step_needs_a_merge_strategy_not_the_incremental_flag(tmp_path):
    # The engine builds by merge_strategy alone, the flag is only recorded: a test step does too.
    models = MODELS.replace("  incremental\n", "")
    assert "incremental" not in models
    report = run_unit_tests(project(tmp_path, STEPS, models=models), warehouse(tmp_path))
    assert [(r.name, r.is_passed) for r in report.results] == [
        ("upsert_step", True),
        ("append_step", True),
        ("append_new_step", True),
    ], [r.as_json() for r in report.failed]


def test_a_wrong_incremental_expectation_fails(tmp_path):
    # Expecting the cancelled order to stay (a merge by the delta's own keys) is what the engine
    # does not do.
    wrong = STEPS.replace(
        "    (2,        'shipped', 21.00)\n",
        "    (1,        'paid',    10.00)\n    (2,        'shipped', 21.00)\n",
        1,
    )
    folder, wh = project(tmp_path, wrong), warehouse(tmp_path)
    report = run_unit_tests(folder, wh, ["latest"])
    (result,) = report.results
    assert [row.values for row in result.missing] == [("1", "'paid'", "10.00")]


def test_the_shop_tests_pass_and_leave_the_warehouse_untouched(tmp_path):
    folder, wh = make_shop(tmp_path, rows=200)
    before = warehouse_digest(wh)
    result = CliRunner().invoke(main, ["test", str(folder), "--warehouse", str(wh)])
    assert result.exit_code == 0, result.output
    assert "10 passed, 0 failed" in result.output
    assert warehouse_digest(wh) == before
    selected = json.loads(
        CliRunner()
        .invoke(main, ["test", str(folder), "--warehouse", str(wh), "--models", "stg_orders", "--json"])
        .output
    )
    assert [case["test"] for case in selected["tests"]] == ["drops_cancelled", "upsert_step"]
    assert warehouse_digest(wh) == before


def test_a_project_without_tests_passes(tmp_path):
    folder = project(tmp_path, "")
    result = run(folder, warehouse(tmp_path))
    assert result.exit_code == 0 and "no unit tests" in result.output


# -- errors ---------------------------------------------------------------------------------------
LOAD_ERRORS = [
    # E060: a fixture table that is no header of names followed by rows of as many values.
    ("E060", "test paid t {\n  given orders [(order_id, status) (1)]\n  expect [(order_id)]\n}\n", 2, 36),
    ("E060", "test paid t {\n  given orders [(order_id + 1) (1)]\n  expect [(order_id)]\n}\n", 2, 18),
    ("E060", "test paid t {\n  given orders []\n  expect [(order_id)]\n}\n", 2, 16),
    ("E060", "test paid t {\n  given orders [(a, a)]\n  expect [(order_id)]\n}\n", 2, 17),
    ("E060", "test paid t {\n  given orders [order_id]\n  expect [(order_id)]\n}\n", 2, 17),
    # E061: no expect, a repeated part, previous on a full model, a repeated test name.
    ("E061", "test paid t {\n  given orders [(order_id)]\n}\n", 1, 1),
    ("E061", "test paid t {\n  expect [(order_id)]\n  expect [(order_id)]\n}\n", 3, 3),
    ("E061", "test paid t {\n  previous [(order_id)]\n  expect [(order_id)]\n}\n", 2, 12),
    ("E061", "test paid t {\n  expect [(order_id)]\n}\ntest paid t {\n  expect [(order_id)]\n}\n", 4, 1),
    # E062: a test of no model, fixture rows for a relation the model does not read.
    ("E062", "test payd t {\n  expect [(order_id)]\n}\n", 1, 1),
    ("E062", "test paid t {\n  given customers [(customer_id)]\n  expect [(order_id)]\n}\n", 2, 19),
    # E001: the grammar's own errors.
    ("E001", "test paid t {\n  given [(order_id)]\n  expect [(order_id)]\n}\n", 2, 9),
    ("E001", "test paid t {\n  given orders (order_id)\n  expect [(order_id)]\n}\n", 2, 16),
    ("E001", "test paid t {\n  expct [(order_id)]\n}\n", 2, 3),
    # E002: a value that is no SQL expression.
    ("E002", "test paid t {\n  given orders [(order_id) (1 +)]\n  expect [(order_id)]\n}\n", 2, 31),
]


@pytest.mark.parametrize(("code", "tests", "line", "column"), LOAD_ERRORS)
def test_errors_in_a_test_definition_are_coded_with_their_position(tmp_path, code, tests, line, column):
    folder, wh = project(tmp_path, tests), warehouse(tmp_path)
    error = error_of(folder, wh)
    first = error.errors[0]
    assert (first.code, first.location.line, first.location.column) == (code, line, column), error.render()
    assert first.location.file.endswith("tests.strata")
    if "given orders (" in tests or "expct" in tests:
        assert "a test block holds" in (first.hint or "")
    result = run(folder, wh)
    assert result.exit_code == 1 and f"error[{code}]" in result.output and "Traceback" not in result.output


def test_a_test_of_no_model_is_told_the_close_name_or_to_go_with_its_model(tmp_path):
    typo = error_of(
        project(tmp_path / "typo", "test payd t {\n  expect [(order_id)]\n}\n"), warehouse(tmp_path / "typo")
    )
    assert typo.errors[0].hint.startswith("did you mean `paid`?"), typo.render()
    gone = error_of(
        project(tmp_path / "gone", "test monthly t {\n  expect [(order_id)]\n}\n"),
        warehouse(tmp_path / "gone"),
    )
    assert "or remove the test with its model" in gone.errors[0].hint, gone.render()


RUN_ERRORS = [
    # E063: a fixture column the source's table does not have; an expected column the model does not give.
    (
        "E063",
        "test paid t {\n  given orders [(order_id, colour) (1, 'red')]\n  expect [(order_id)]\n}\n",
        True,
        2,
        16,
    ),
    (
        "E063",
        "test paid t {\n  given orders [(order_id) (1)]\n  expect [(order_id, status)]\n}\n",
        True,
        3,
        10,
    ),
    ("E063", "test latest t {\n  previous [(order_id, colour)]\n  expect [(order_id)]\n}\n", True, 2, 12),
    # Without a warehouse: a column the model reads that the fixture does not give.
    ("E063", "test paid t {\n  given orders [(order_id) (1)]\n  expect [(order_id)]\n}\n", False, 2, 16),
    # E064: a value DuckDB cannot store in the column; a model DuckDB cannot run over the values.
    ("E064", "test paid t {\n  given orders [(order_id) ('one')]\n  expect [(order_id)]\n}\n", True, 2, 28),
    (
        "E064",
        "test paid t {\n  given orders [(order_id) (1) ('two') (3)]\n  expect [(order_id)]\n}\n",
        True,
        2,
        32,
    ),
    (
        "E064",
        "test paid t {\n  given orders [(order_id, customer_id, status, amount) (1, 1, 5, 1)]\n"
        "  expect [(order_id)]\n}\n",
        False,
        1,
        1,
    ),
    # E061: a step of an upsert the engine builds fully (its key is computed, not traced to orders).
    ("E061", "test keyed t {\n  previous [(k)]\n  expect [(k)]\n}\n", True, 2, 12),
    # E061: an input not given whose columns are not known.
    ("E061", "test paid t {\n  expect [(order_id)]\n}\n", False, 1, 1),
]


@pytest.mark.parametrize(("code", "tests", "with_warehouse", "line", "column"), RUN_ERRORS)
def test_errors_found_running_a_case_are_coded_with_their_position(
    tmp_path, code, tests, with_warehouse, line, column
):
    folder = project(tmp_path, tests)
    wh = warehouse(tmp_path) if with_warehouse else tmp_path / "absent.duckdb"
    error = error_of(folder, wh)
    assert (error.code, error.location.line, error.location.column) == (code, line, column), error.render()
    result = run(folder, wh)
    assert result.exit_code == 1 and f"error[{code}]" in result.output and "Traceback" not in result.output


def test_an_unknown_model_selection_is_e025(tmp_path):
    folder, wh = project(tmp_path, PAID_PASSES), warehouse(tmp_path)
    result = run(folder, wh, "--models", "nope")
    assert result.exit_code == 1 and "error[E025]" in result.output


def test_test_blocks_do_not_change_what_a_project_builds(tmp_path):
    with_tests = load_project(project(tmp_path, PAID_PASSES))
    without = load_project(project(tmp_path, ""))
    assert with_tests.models == without.models and with_tests.sources == without.sources
    assert len(with_tests.tests) == 1 and not without.tests


def test_every_shop_model_has_a_unit_test_and_every_merge_strategy_a_step():
    tests = load_project(SHOP).tests
    assert {test.model for test in tests} == SHOP_MODELS
    steps = {test.model for test in tests if test.is_incremental_step}
    assert steps == {"stg_orders", "order_status_log", "first_seen_orders"}  # upsert, append, append_new
