"""Property: random histories of a ledger source (appends, updates adding or rewriting rows,
deletes behind the ledger, SNAPSHOT rewrites, late commits, uncommitted rows, drains) and of a
change feed (inserts, updates, deletes, re-inserts, events out of order and repeated); after every
run each model equals its full recomputation, compared as row-hash multisets."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_LEDGER_DRAINED, StrataError
from strata_dagster_tests.engine.sources.test_change_feeds import Feed
from strata_dagster_tests.support.engine_support import history_count
from strata_dagster_tests.support.incremental_support import multiset
from strata_dagster_tests.support.log_support import (
    DELETE_FORMS,
    FULL_LEDGER,
    T0,
    feed_module,
    full_customers,
    make_feed_project,
    make_ledger_project,
)

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
STATUSES = ["open", "paid", "void"]
keys = st.integers(min_value=0, max_value=8)
values = st.tuples(keys, st.sampled_from(STATUSES), st.integers(-2, 5))
ledger_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(values, min_size=1, max_size=3)),
        st.tuples(st.just("update"), st.lists(values, min_size=1, max_size=3)),  # adds versions
        st.tuples(st.just("rewrite"), st.lists(values, min_size=1, max_size=3)),  # replaces the key's rows
        st.tuples(st.just("delete"), st.lists(keys, min_size=1, max_size=2)),  # behind the ledger
        st.tuples(st.just("snapshot"), st.lists(values, min_size=0, max_size=4)),
        st.tuples(st.just("late"), st.lists(values, min_size=1, max_size=2)),  # committed in the past
        st.tuples(st.just("uncommitted"), st.lists(values, min_size=1, max_size=2)),
        st.tuples(st.just("drain"), st.lists(values, min_size=1, max_size=2)),
    ),
    min_size=1,
    max_size=5,
)


class Ledger:
    """The source's rows and its ledger, written the way a ledger-keeping system writes them."""

    def __init__(self, warehouse) -> None:
        self.warehouse = warehouse
        self.txn = 0
        self.pending: list[int] = []  # transactions whose rows are written but not yet committed

    def commit(self, con, kind: str, rows, minutes: int | None = None) -> int:
        self.txn += 1
        for row in rows:
            con.execute("INSERT INTO raw.orders VALUES (?, ?, ?, ?)", [*row, self.txn])
        stamp = T0 + dt.timedelta(minutes=10 * self.txn if minutes is None else minutes)
        con.execute("INSERT INTO raw.order_txns VALUES (?, ?, ?)", [self.txn, stamp, kind])
        return self.txn

    def apply(self, con, step) -> None:
        kind, argument = step
        unread = self.pending  # committed by this step: no run has read them yet
        for txn in self.pending:  # what was written uncommitted commits with the next step
            con.execute(
                "INSERT INTO raw.order_txns VALUES (?, ?, 'APPEND')",
                [txn, T0 + dt.timedelta(minutes=10 * txn)],
            )
        self.pending = []
        if kind in ("append", "update"):
            self.commit(con, kind.upper(), argument)
        elif kind == "rewrite":
            con.execute("DELETE FROM raw.orders WHERE list_contains(?, id)", [[row[0] for row in argument]])
            self.commit(con, "UPDATE", argument)
        elif kind == "delete":
            # Behind the ledger. Every row of a transaction no run has read yet, gone before the
            # first read, is a drain (the `drain` step: E091): such a transaction keeps its rows.
            con.execute(
                "DELETE FROM raw.orders WHERE list_contains($ids, id) AND txn_id NOT IN ("
                "SELECT txn_id FROM raw.orders WHERE list_contains($unread, txn_id) "
                "GROUP BY txn_id HAVING bool_and(list_contains($ids, id)))",
                {"ids": argument, "unread": unread},
            )
        elif kind == "snapshot":
            con.execute("DELETE FROM raw.orders")
            self.commit(con, "SNAPSHOT", argument)
        elif kind == "late":
            self.commit(con, "APPEND", argument, minutes=1)  # before every watermark
        elif kind == "uncommitted":
            self.txn += 1
            con.executemany(
                "INSERT INTO raw.orders VALUES (?, ?, ?, ?)", [[*row, self.txn] for row in argument]
            )
            self.pending.append(self.txn)


def assert_ledger_models_equal_full(con) -> None:
    for model in ("up", "ap"):
        assert multiset(con, f"SELECT * FROM main.v_{model}") == multiset(con, FULL_LEDGER[model]), model
    # append_new keeps the first row of each key: its keys are the full rebuild's.
    keys_of = "SELECT DISTINCT id FROM ({}) r"
    assert multiset(con, keys_of.format("SELECT * FROM main.v_an")) == multiset(
        con, keys_of.format(FULL_LEDGER["an"])
    )


@SETTINGS
@given(history=ledger_steps)
# `an`'s window brings only a row its filter drops: its state stays (early cutoff), and its window's
# end must move with it, else the next build reads that transaction again and, its rows deleted
# behind the ledger since, stops with E091 as if the source were drained.
@example(history=[("append", [(0, "open", -1)]), ("delete", [0])])
# A delete in the step that commits a pending transaction leaves that transaction's rows: deleting
# them before any run read it is a drain, which the source cannot tell from one (E091).
@example(history=[("uncommitted", [(0, "open", 0)]), ("delete", [0])])
@example(history=[("uncommitted", [(0, "open", 0), (1, "paid", 1)]), ("delete", [0])])  # one row of two
def test_ledger_histories_equal_full_rebuilds(tmp_path_factory, history):
    project, warehouse = make_ledger_project(tmp_path_factory.mktemp("ledger"))
    ledger = Ledger(warehouse)
    con = duckdb.connect(str(warehouse))
    ledger.commit(con, "APPEND", [(1, "open", 1), (2, "paid", 2), (3, "void", 3)])
    con.close()
    run_project(project, warehouse)
    for step in history:
        con = duckdb.connect(str(warehouse))
        if step[0] == "drain":
            # A transaction whose rows are gone by the time the build reads its window.
            txn = ledger.commit(con, "APPEND", step[1])
            con.execute("CREATE TEMP TABLE drained AS SELECT * FROM raw.orders WHERE txn_id = ?", [txn])
            con.execute("DELETE FROM raw.orders WHERE txn_id = ?", [txn])
            con.close()
            entries = history_count(warehouse)
            with pytest.raises(StrataError) as error:
                run_project(project, warehouse, only_stale=True)
            assert error.value.code == E_LEDGER_DRAINED
            assert history_count(warehouse) == entries  # nothing published
            con = duckdb.connect(str(warehouse))
            con.executemany("INSERT INTO raw.orders VALUES (?, ?, ?, ?)", [[*row, txn] for row in step[1]])
        else:
            ledger.apply(con, step)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        con = duckdb.connect(str(warehouse))
        try:
            assert_ledger_models_equal_full(con)
            if step[0] == "snapshot":
                assert all(result.outcome(model).path in ("full", "cutoff") for model in ("up", "ap", "an"))
        finally:
            con.close()


events = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "delete", "read"]),
        st.integers(min_value=0, max_value=5),
        st.sampled_from(["ann", "bob", "cy"]),
        st.sampled_from(["eu", "us", "nowhere"]),
        st.one_of(st.none(), st.integers(min_value=1, max_value=40)),  # an explicit (maybe old) position
        st.booleans(),  # written twice: a repeated event
    ),
    min_size=1,
    max_size=4,
)


@SETTINGS
@given(
    history=st.lists(events, min_size=1, max_size=5),
    deletes=st.sampled_from(sorted(DELETE_FORMS)),
    arrival=st.booleans(),
)
def test_feed_histories_equal_full_recomputations(tmp_path_factory, history, deletes, arrival):
    project, warehouse = make_feed_project(tmp_path_factory.mktemp("feed"), feed_module(deletes, arrival))
    feed = Feed(warehouse, deletes)
    feed.write(("insert", 0, "ann", "eu"), ("insert", 1, "bob", "us"))
    run_project(project, warehouse)
    for batch in history:
        for kind, key, name, region, position, is_repeated in batch:
            event = (kind, key, None if kind == "delete" else name, None if kind == "delete" else region)
            row = feed.row(*event, position)
            con = duckdb.connect(str(warehouse))
            con.executemany(
                "INSERT INTO raw.customer_changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [row] * (2 if is_repeated else 1),
            )
            con.close()
        outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
        con = duckdb.connect(str(warehouse))
        try:
            expected = multiset(con, full_customers(deletes, arrival))
            assert multiset(con, "SELECT * FROM main.v_customers") == expected, (
                batch,
                outcome.path,
                outcome.detail,
            )
            if arrival:  # every event arrives after the last build: always a delta
                assert outcome.path in ("delta", "cutoff"), outcome.detail
        finally:
            con.close()
