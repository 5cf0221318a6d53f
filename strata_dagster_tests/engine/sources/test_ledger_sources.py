"""Ledger sources: the window of committed transactions is a model's delta; a SNAPSHOT in it makes
the build full with the reason (in history and `strata plan`); a drained source stops the build."""

import datetime as dt

import duckdb
import pytest

from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.errors import E_LEDGER_DRAINED, E_SOURCE, StrataError
from strata_dagster_tests.support.engine_support import edit_module, execute, history_count
from strata_dagster_tests.support.incremental_support import multiset
from strata_dagster_tests.support.log_support import FULL_LEDGER, T0, make_ledger_project

MODELS = ("up", "ap", "an")


def commit(warehouse, txn: int, kind: str, rows=(), minutes: int | None = None) -> None:
    """One transaction: its rows (id, status, v) and its ledger entry, committed together."""
    con = duckdb.connect(str(warehouse))
    try:
        con.execute("BEGIN")
        for row in rows:
            con.execute("INSERT INTO raw.orders VALUES (?, ?, ?, ?)", [*row, txn])
        stamp = T0 + dt.timedelta(minutes=txn if minutes is None else minutes)
        con.execute("INSERT INTO raw.order_txns VALUES (?, ?, ?)", [txn, stamp, kind])
        con.execute("COMMIT")
    finally:
        con.close()


def assert_equal_to_full(warehouse) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        for model in MODELS:
            assert multiset(con, f"SELECT * FROM main.v_{model}") == multiset(con, FULL_LEDGER[model]), model
    finally:
        con.close()


@pytest.fixture
def ledger(tmp_path):
    project, warehouse = make_ledger_project(tmp_path)
    commit(warehouse, 1, "APPEND", [(1, "open", 1), (2, "open", 2)])
    run_project(project, warehouse)
    return project, warehouse


def test_the_windows_transactions_are_the_delta(ledger):
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "paid", 3), (4, "void", -1)])
    commit(warehouse, 3, "UPDATE", [(5, "paid", 7)])
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        outcome = result.outcome(model)
        assert outcome.path == "delta", (model, outcome.detail)
        assert outcome.detail["window"]["low"] == "2025-01-01 00:01:00"
        assert outcome.detail["window"]["high"] == "2025-01-01 00:03:00"
        assert outcome.detail["rows_read"] == 3
    assert_equal_to_full(warehouse)
    # Nothing new in the ledger: nothing is stale.
    assert run_project(project, warehouse, only_stale=True).outcome("up").path == "reused"


def test_an_update_rewriting_rows_in_place_is_an_upserts_delta(ledger):
    """Rows that leave earlier transactions (rewritten by the window's, or deleted) are found by
    the upsert; the append models, which cannot take them back, build in full and say why."""
    project, warehouse = ledger
    execute(warehouse, "DELETE FROM raw.orders WHERE id = 1", "DELETE FROM raw.orders WHERE id = 2")
    commit(warehouse, 2, "UPDATE", [(1, "void", 5)])
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    assert result.outcome("up").detail["deleted_keys_checked"] is True
    for model in ("ap", "an"):
        assert result.outcome(model).path == "full"
        assert "left the source at or below the watermark" in result.outcome(model).detail["full_reason"]
    assert_equal_to_full(warehouse)


def test_a_snapshot_in_the_window_builds_in_full_and_says_so(ledger):
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    execute(warehouse, "DELETE FROM raw.orders")
    commit(warehouse, 3, "SNAPSHOT", [(1, "paid", 9), (5, "open", 4)])
    plan = plan_project(project, warehouse, only_stale=True)
    for model in MODELS:
        assert plan.model(model).path == "full"
        assert "transaction 3 in the window is a SNAPSHOT" in plan.model(model).reason
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        assert result.outcome(model).path == "full"
        assert "is a SNAPSHOT of `orders`" in result.outcome(model).detail["full_reason"]
    assert_equal_to_full(warehouse)
    # The next window starts after the snapshot: a delta again.
    commit(warehouse, 4, "APPEND", [(6, "open", 1)])
    result = run_project(project, warehouse, only_stale=True)
    assert {result.outcome(model).path for model in MODELS} == {"delta"}
    assert_equal_to_full(warehouse)


def test_plan_tells_the_window_a_delta_reads(ledger):
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    planned = plan_project(project, warehouse, only_stale=True).model("up")
    assert planned.path == "delta"
    assert planned.window == ("2025-01-01 00:01:00", "2025-01-01 00:02:00")
    assert planned.rows_to_read == 1


def test_rows_of_transactions_not_in_the_ledger_are_not_read(ledger):
    """A row whose transaction has no ledger entry yet is uncommitted: neither a full build nor a
    delta reads it, until its transaction commits."""
    project, warehouse = ledger
    execute(warehouse, "INSERT INTO raw.orders VALUES (9, 'open', 9, 5)")
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    run_project(project, warehouse, only_stale=True)
    assert_equal_to_full(warehouse)
    assert not execute(warehouse, "SELECT * FROM main.v_up WHERE id = 9")
    commit(warehouse, 5, "APPEND")
    assert run_project(project, warehouse, only_stale=True).outcome("up").path == "delta"
    assert execute(warehouse, "SELECT id FROM main.v_up WHERE id = 9") == [(9,)]
    assert_equal_to_full(warehouse)


def test_verify_compares_with_the_committed_rows(ledger):
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    run_project(project, warehouse, only_stale=True)
    assert verify(project, warehouse).is_equal
    execute(warehouse, "UPDATE raw.orders SET v = 100 WHERE id = 1")  # edited behind the ledger's back
    report = verify(project, warehouse)
    # append_new is compared on its merge keys, which the edit left as they were.
    assert {model.model for model in report.mismatched} == {"up", "ap"}


def test_a_drained_source_stops_the_build(ledger):
    """The ledger lists transactions in the window whose rows the source no longer holds: E091
    names them, and nothing is published."""
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    commit(warehouse, 3, "APPEND", [(4, "open", 4)])
    execute(warehouse, "DELETE FROM raw.orders WHERE txn_id IN (2, 3)")  # drained
    entries = history_count(warehouse)
    with pytest.raises(StrataError) as planned:
        plan_project(project, warehouse, only_stale=True)
    assert planned.value.code == E_LEDGER_DRAINED
    with pytest.raises(StrataError) as error:
        run_project(project, warehouse, only_stale=True)
    assert error.value.code == E_LEDGER_DRAINED
    assert "(2, 3)" in str(error.value)
    assert history_count(warehouse) == entries
    # Restored, the delta reads them.
    execute(warehouse, "INSERT INTO raw.orders VALUES (3, 'open', 3, 2), (4, 'open', 4, 3)")
    assert run_project(project, warehouse, only_stale=True).outcome("up").path == "delta"
    assert_equal_to_full(warehouse)


def test_a_ledger_that_cannot_be_read_is_a_source_error(tmp_path):
    project, warehouse = make_ledger_project(tmp_path)
    edit_module(project / "orders.strata", "ledger: raw.order_txns", "ledger: raw.missing_txns")
    with pytest.raises(StrataError) as error:
        run_project(project, warehouse)
    assert error.value.code == E_SOURCE


def test_a_source_is_observed_changed_when_its_ledger_gains_a_transaction(ledger):
    """What Dagster's source observation reports covers the ledger: a transaction whose rows are
    gone still makes the source's models stale, so the build that finds it drained runs."""
    project, warehouse = ledger
    before = observe_sources(project, warehouse, ["orders"])["orders"].fingerprint
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint == before
    commit(warehouse, 2, "APPEND")  # a transaction without rows: the source's rows did not change
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint != before


@pytest.mark.parametrize("kind", ["DELETE", None])
def test_a_transaction_of_another_kind_builds_in_full(ledger, kind):
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    execute(warehouse, "UPDATE raw.order_txns SET kind = ? WHERE txn_id = 2", params=[kind])
    outcome = run_project(project, warehouse, only_stale=True).outcome("up")
    assert outcome.path == "full" and "neither APPEND, UPDATE nor SNAPSHOT" in outcome.detail["full_reason"]
    assert_equal_to_full(warehouse)


def test_rows_a_later_update_rewrote_are_no_drain(ledger):
    """Transactions of the window whose rows a later UPDATE of the window rewrote hold no row any
    more, legitimately: the build takes its delta."""
    project, warehouse = ledger
    commit(warehouse, 2, "APPEND", [(3, "open", 3)])
    commit(warehouse, 3, "APPEND", [(4, "open", 4)])
    execute(warehouse, "DELETE FROM raw.orders WHERE id IN (3, 4)")
    commit(warehouse, 4, "UPDATE", [(3, "paid", 5), (4, "paid", 6)])
    assert run_project(project, warehouse, only_stale=True).outcome("up").path == "delta"
    assert_equal_to_full(warehouse)
