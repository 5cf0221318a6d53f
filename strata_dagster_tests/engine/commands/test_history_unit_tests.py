"""`test` blocks of history models over a ledger and over a plain table: the fixture rows are read
as a build over all of them reads the source, so the versions a real build of the same rows gives
pass (and a wrong row fails with a diff); what a test cannot state is refused (E061)."""

import datetime as dt

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import example
from hypothesis import given as given_examples
from hypothesis import strategies as st

from strata_dagster.cli.main import main
from strata_dagster.engine.commands.unit_tests import run_unit_tests
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_HISTORY_SOURCE, E_TEST_DEFINITION, E_TEST_MODEL, StrataError
from strata_dagster.language import load_project
from strata_dagster_tests.engine.sources.test_ledger_history import ledger_steps
from strata_dagster_tests.engine.sources.test_ledger_sources import commit
from strata_dagster_tests.engine.sources.test_log_properties import SETTINGS, Ledger
from strata_dagster_tests.support.engine_support import execute, make_module_project
from strata_dagster_tests.support.log_support import (
    LEDGER_MODULE,
    TABLE_HISTORY_MODULE,
    ledger_history_module,
    make_ledger_project,
)
from strata_dagster_tests.support.unit_test_support import strata_test

LEDGER_COLUMNS = ("id", "status", "v", "txn_id", "valid_from", "valid_to", "is_current")
TABLE_COLUMNS = ("id", "name", "region", "valid_to", "is_current", "was_deleted")


def write_ledger(warehouse) -> None:
    """Transactions 2 and 3 commit at the same instant (the greater id wins key 1 there); rows of
    transaction 9 are in no ledger entry: not committed."""
    commit(warehouse, 1, "APPEND", [(1, "open", 1), (2, "open", 2)])
    commit(warehouse, 2, "UPDATE", [(1, "paid", 1), (2, "paid", 2)])
    commit(warehouse, 3, "UPDATE", [(1, "shipped", 1)], minutes=2)
    execute(warehouse, "INSERT INTO raw.orders VALUES (3, 'open', 3, 9)")


def built(warehouse, view: str, columns) -> list[tuple]:
    return execute(warehouse, f"SELECT {', '.join(columns)} FROM main.{view} ORDER BY ALL")


def assert_readable_diff(project, warehouse, wrong_row: str) -> None:
    shown = CliRunner().invoke(main, ["test", str(project), "--warehouse", str(warehouse)])
    assert shown.exit_code == 1, shown.output
    assert f"- {wrong_row}  expected at " in shown.output, shown.output
    assert "given by the model, not expected" in shown.output


def test_a_ledger_history_test_reads_the_committed_rows_as_a_build_does(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module())
    write_ledger(warehouse)
    run_project(project, warehouse)
    versions = built(warehouse, "v_order_history", LEDGER_COLUMNS)
    minute = [dt.datetime(2025, 1, 1, 0, m) for m in range(3)]
    assert versions == [
        (1, "open", 1, 1, minute[1], minute[2], False),
        (1, "shipped", 1, 3, minute[2], None, True),
        (2, "open", 2, 1, minute[1], minute[2], False),
        (2, "paid", 2, 2, minute[2], None, True),
    ]
    rows = execute(warehouse, "SELECT * FROM raw.orders ORDER BY ALL")
    ledger = execute(warehouse, "SELECT txn_id, committed_at FROM raw.order_txns ORDER BY ALL")
    given = {
        "orders": (("id", "status", "v", "txn_id"), rows),
        "order_txns": (("txn_id", "committed_at"), ledger),
    }
    (project / "tests.strata").write_text(strata_test("order_history", given, LEDGER_COLUMNS, versions))
    assert run_unit_tests(project, warehouse).is_passed
    # Without the warehouse the fixtures' columns are typed as their values are written.
    assert run_unit_tests(project, tmp_path / "absent.duckdb").is_passed

    wrong = [*versions[:1], (1, "shipped", 1, 3, minute[2], None, False), *versions[2:]]
    (project / "tests.strata").write_text(strata_test("order_history", given, LEDGER_COLUMNS, wrong))
    report = run_unit_tests(project, warehouse)
    assert not report.is_passed
    assert [row.values for row in report.failed[0].unexpected] == [
        ("1", "'shipped'", "1", "3", "timestamp '2025-01-01 00:02:00'", "null", "true")
    ]
    assert_readable_diff(
        project, warehouse, "(1, 'shipped', 1, 3, timestamp '2025-01-01 00:02:00', null, false)"
    )


@SETTINGS
@given_examples(history=ledger_steps, checked=st.sampled_from([None, "status"]))
@example(history=[("update", [(2, "paid", 5)]), ("uncommitted", [(2, "void", 1)])], checked="status")
@example(history=[("snapshot", [(1, "paid", 1)]), ("late", [(2, "open", 0)])], checked=None)
def test_a_ledger_history_test_of_any_ledger_expects_what_a_build_gives(tmp_path_factory, history, checked):
    """Random transactions (rows rewritten in place, SNAPSHOTs, late and uncommitted ones, two
    transactions committed at the same instant): a test block giving the source's rows and its
    ledger, and expecting the versions a build of them gives, passes."""
    project, warehouse = make_ledger_project(
        tmp_path_factory.mktemp("ledger"), ledger_history_module(checked)
    )
    ledger = Ledger(warehouse)
    con = duckdb.connect(str(warehouse))
    try:
        ledger.commit(con, "APPEND", [(1, "open", 1), (2, "paid", 2), (1, "void", 3)])
        for step in history:
            ledger.apply(con, step)
            if step[0] in ("append", "update"):
                ledger.commit(con, "UPDATE", step[1][:1], minutes=10 * ledger.txn)
    finally:
        con.close()
    run_project(project, warehouse)
    given = {
        "orders": (("id", "status", "v", "txn_id"), execute(warehouse, "SELECT * FROM raw.orders")),
        "order_txns": (
            ("txn_id", "committed_at", "kind"),
            execute(warehouse, "SELECT * FROM raw.order_txns"),
        ),
    }
    versions = built(warehouse, "v_order_history", LEDGER_COLUMNS)
    (project / "tests.strata").write_text(strata_test("order_history", given, LEDGER_COLUMNS, versions))
    report = run_unit_tests(project, warehouse)
    assert report.is_passed, report.as_json()


def test_a_ledger_history_test_needs_the_ledger(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module())
    given = {"orders": (("id", "status", "v", "txn_id"), [(1, "open", 1, 1)])}
    (project / "tests.strata").write_text(strata_test("order_history", given, ("id",), [(1,)]))
    with pytest.raises(StrataError) as caught:
        run_unit_tests(project, warehouse)
    assert caught.value.code == E_TEST_DEFINITION
    assert "add `given order_txns [(txn_id, committed_at) ...]`" in str(caught.value.errors[0].hint)


def test_a_model_over_a_ledger_reads_committed_rows_when_the_test_gives_the_ledger(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, LEDGER_MODULE)
    rows = (("id", "status", "v", "txn_id"), [(1, "open", 1, 1), (2, "open", 2, 9)])
    ledger = (("txn_id", "committed_at"), [(1, dt.datetime(2025, 1, 1))])
    (project / "tests.strata").write_text(
        strata_test("ap", {"orders": rows, "order_txns": ledger}, ("id", "txn_id"), [(1, 1)])
        + strata_test("ap", {"orders": rows}, ("id", "txn_id"), [(1, 1), (2, 9)]).replace(
            " versions ", " all "
        )
    )
    assert run_unit_tests(project, warehouse).is_passed


def test_a_ledger_given_to_a_model_that_reads_no_ledger_is_refused(tmp_path):
    project, _ = make_ledger_project(tmp_path, LEDGER_MODULE + TABLE_HISTORY_MODULE)
    ledger = (("txn_id", "committed_at"), [(1, dt.datetime(2025, 1, 1))])
    (project / "tests.strata").write_text(
        strata_test("customer_history", {"order_txns": ledger}, ("id",), [])
    )
    with pytest.raises(StrataError) as caught:
        load_project(project)
    assert caught.value.code == E_TEST_MODEL


def make_table_project(tmp_path):
    return make_module_project(
        tmp_path,
        "customers.strata",
        TABLE_HISTORY_MODULE,
        "CREATE TABLE raw.customers (id BIGINT, name VARCHAR, region VARCHAR)",
    )


def test_a_table_history_test_is_one_build_of_the_tables_rows(tmp_path):
    project, warehouse = make_table_project(tmp_path)
    rows = [(1, "ann", "eu"), (2, "bob", "nowhere"), (3, "cy", "us")]
    execute(
        warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu'), (2, 'bob', 'nowhere'), (3, 'cy', 'us')"
    )
    run_project(project, warehouse, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    versions = built(warehouse, "v_customer_history", TABLE_COLUMNS)
    assert versions == [(1, "ann", "eu", None, True, False), (3, "cy", "us", None, True, False)]
    given = {"customers": (("id", "name", "region"), rows)}
    (project / "tests.strata").write_text(strata_test("customer_history", given, TABLE_COLUMNS, versions))
    assert run_unit_tests(project, warehouse).is_passed
    assert run_unit_tests(project, tmp_path / "absent.duckdb").is_passed

    wrong = [versions[0], (2, "bob", "nowhere", None, True, False)]
    (project / "tests.strata").write_text(strata_test("customer_history", given, TABLE_COLUMNS, wrong))
    report = run_unit_tests(project, warehouse)
    assert not report.is_passed and report.failed[0].missing and report.failed[0].unexpected
    assert_readable_diff(project, warehouse, "(2, 'bob', 'nowhere', null, true, false)")


def test_a_table_history_test_cannot_expect_the_builds_time(tmp_path):
    project, warehouse = make_table_project(tmp_path)
    given = {"customers": (("id", "name", "region"), [(1, "ann", "eu")])}
    expected = [(1, dt.datetime(2026, 1, 1))]
    (project / "tests.strata").write_text(
        strata_test("customer_history", given, ("id", "valid_from"), expected)
    )
    with pytest.raises(StrataError) as caught:
        run_unit_tests(project, warehouse)
    assert caught.value.code == E_TEST_DEFINITION
    assert "leave `valid_from` out of `expect`" in str(caught.value.errors[0].hint)


def test_a_history_test_with_a_previous_state_is_refused(tmp_path):
    project, _ = make_table_project(tmp_path)
    block = strata_test("customer_history", {}, ("id",), [])
    (project / "tests.strata").write_text(block.replace("  expect", "  previous [(id) (1)]\n  expect"))
    with pytest.raises(StrataError) as caught:
        load_project(project)
    assert caught.value.code == E_TEST_DEFINITION
    assert "is a history: its test is one build" in str(caught.value)


def test_a_history_test_of_a_history_the_engine_refuses_says_why(tmp_path):
    module = ledger_history_module().replace("select id, status", "select id + 1 AS id, status")
    project, warehouse = make_ledger_project(tmp_path, module)
    given = {"orders": (("id",), []), "order_txns": (("txn_id",), [])}
    (project / "tests.strata").write_text(strata_test("order_history", given, ("id",), []))
    with pytest.raises(StrataError) as caught:
        run_unit_tests(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE
