"""History models over a ledger source: one row per version of each key by its transactions'
commits; deltas replace the versions of the keys the window's transactions wrote, a SNAPSHOT in
the window builds in full, and every build equals the recomputation from the committed rows."""

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_HISTORY_SOURCE, StrataError
from strata_dagster_tests.engine.sources.test_ledger_sources import commit
from strata_dagster_tests.engine.sources.test_log_properties import SETTINGS, Ledger, values
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.incremental_support import multiset
from strata_dagster_tests.support.log_support import (
    full_ledger_history,
    ledger_history_module,
    make_ledger_project,
)


def assert_equal_to_full(warehouse, checked=None) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        assert multiset(con, "SELECT * FROM main.v_order_history") == multiset(
            con, full_ledger_history(checked)
        )
    finally:
        con.close()


def versions(warehouse) -> list[tuple]:
    return execute(
        warehouse,
        "SELECT id, status, minute(valid_from), minute(valid_to), is_current FROM main.v_order_history "
        "ORDER BY id, valid_from",
    )


def test_each_commit_of_a_key_opens_a_version(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module())
    commit(warehouse, 1, "APPEND", [(1, "open", 1), (2, "open", 2)])
    assert run_project(project, warehouse).outcome("order_history").path == "full"
    commit(warehouse, 2, "UPDATE", [(1, "paid", 1)])
    commit(warehouse, 3, "APPEND", [(3, "open", 3)])
    outcome = run_project(project, warehouse, only_stale=True).outcome("order_history")
    assert outcome.path == "delta", outcome.detail
    assert outcome.detail["changed_keys"] == 2
    assert versions(warehouse) == [
        (1, "open", 1, 2, False),
        (1, "paid", 2, None, True),
        (2, "open", 1, None, True),
        (3, "open", 3, None, True),
    ]
    assert_equal_to_full(warehouse)
    assert verify(project, warehouse, ["order_history"]).is_equal


def test_a_snapshot_in_the_window_builds_the_history_in_full(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module())
    commit(warehouse, 1, "APPEND", [(1, "open", 1)])
    run_project(project, warehouse)
    execute(warehouse, "DELETE FROM raw.orders")
    commit(warehouse, 2, "SNAPSHOT", [(1, "paid", 5), (2, "open", 1)])
    planned = plan_project(project, warehouse, only_stale=True).model("order_history")
    assert planned.path == "full" and "transaction 2 in the window is a SNAPSHOT" in planned.reason
    outcome = run_project(project, warehouse, only_stale=True).outcome("order_history")
    assert outcome.path == "full" and "is a SNAPSHOT of `orders`" in outcome.detail["full_reason"]
    assert versions(warehouse) == [(1, "paid", 2, None, True), (2, "open", 2, None, True)]
    assert_equal_to_full(warehouse)


def test_rows_rewritten_in_place_build_the_history_in_full(tmp_path):
    """An UPDATE that removes a key's earlier rows takes its earlier versions away: only a full
    build recomputes what is left, and says why."""
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module())
    commit(warehouse, 1, "APPEND", [(1, "open", 1), (2, "open", 2)])
    run_project(project, warehouse)
    execute(warehouse, "DELETE FROM raw.orders WHERE id = 1")
    commit(warehouse, 2, "UPDATE", [(1, "paid", 1)])
    outcome = run_project(project, warehouse, only_stale=True).outcome("order_history")
    assert outcome.path == "full" and "left the source" in outcome.detail["full_reason"]
    assert_equal_to_full(warehouse)


def test_checked_columns_version_a_ledger_by_value(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module(checked="status"))
    commit(warehouse, 1, "APPEND", [(1, "open", 1)])
    run_project(project, warehouse)
    commit(warehouse, 2, "UPDATE", [(1, "open", 7)])  # the same status: no new version
    commit(warehouse, 3, "UPDATE", [(1, "paid", 7)])
    assert run_project(project, warehouse, only_stale=True).outcome("order_history").path == "delta"
    assert versions(warehouse) == [(1, "open", 1, 3, False), (1, "paid", 3, None, True)]
    assert_equal_to_full(warehouse, checked="status")


def test_a_ledger_history_by_a_computed_key_is_refused(tmp_path):
    module = ledger_history_module().replace("select id, status", "select id + 1 AS id, status")
    project, warehouse = make_ledger_project(tmp_path, module)
    commit(warehouse, 1, "APPEND", [(1, "open", 1)])
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE
    assert "not columns of `orders` passed through unchanged" in str(caught.value)


ledger_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(values, min_size=1, max_size=3)),
        st.tuples(st.just("update"), st.lists(values, min_size=1, max_size=3)),
        st.tuples(st.just("rewrite"), st.lists(values, min_size=1, max_size=3)),
        st.tuples(st.just("snapshot"), st.lists(values, min_size=0, max_size=4)),
        st.tuples(st.just("late"), st.lists(values, min_size=1, max_size=2)),
        st.tuples(st.just("uncommitted"), st.lists(values, min_size=1, max_size=2)),
    ),
    min_size=1,
    max_size=5,
)


@SETTINGS
@given(history=ledger_steps, checked=st.sampled_from([None, "status"]), same_minute=st.booleans())
def test_ledger_histories_equal_their_recomputation(tmp_path_factory, history, checked, same_minute):
    """Random transactions (appends and updates of versions, rows rewritten in place, SNAPSHOTs,
    late and uncommitted ones, transactions committed at the same instant): after every run the
    history equals its recomputation from the committed rows."""
    project, warehouse = make_ledger_project(
        tmp_path_factory.mktemp("ledger"), ledger_history_module(checked)
    )
    ledger = Ledger(warehouse)
    con = duckdb.connect(str(warehouse))
    ledger.commit(con, "APPEND", [(1, "open", 1), (2, "paid", 2), (1, "void", 3)])
    con.close()
    run_project(project, warehouse)
    for step in history:
        con = duckdb.connect(str(warehouse))
        try:
            ledger.apply(con, step)
            if same_minute and step[0] in ("append", "update"):  # a second commit at the same instant
                ledger.commit(con, "UPDATE", step[1][:1], minutes=10 * ledger.txn)
        finally:
            con.close()
        run_project(project, warehouse, only_stale=True)
        assert_equal_to_full(warehouse, checked)
