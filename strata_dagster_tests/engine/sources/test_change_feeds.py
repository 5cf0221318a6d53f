"""Change feeds: an upsert over a feed's current rows takes the keys whose events a window brought,
so updates, deletes and re-inserts are deltas equal to the recomputation over the whole feed, for
each vendor's way of marking deletes; events out of order need an arrival column to stay deltas."""

import datetime as dt

import duckdb
import pytest

from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import edit_module
from strata_dagster_tests.support.incremental_support import multiset
from strata_dagster_tests.support.log_support import T0, feed_module, full_customers, make_feed_project


class Feed:
    """Writes events as a vendor would: `upsert(id, name, region)` or `delete(id)`, each at the next
    position and arrival unless given."""

    def __init__(self, warehouse, deletes: str = "debezium(op)") -> None:
        self.warehouse = warehouse
        self.deletes = deletes
        self.position = 0

    def write(self, *events) -> None:
        con = duckdb.connect(str(self.warehouse))
        try:
            for event in events:
                con.execute(
                    "INSERT INTO raw.customer_changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", self.row(*event)
                )
        finally:
            con.close()

    def row(self, kind, key, name=None, region=None, position=None):
        self.position += 1
        lsn = self.position if position is None else position
        arrived = T0 + dt.timedelta(minutes=self.position)
        is_delete = kind == "delete"
        op = {"insert": "c", "update": "u", "delete": "d", "read": "r"}[kind]
        if self.deletes != "debezium(op)":
            op = None
        return [
            key,
            name,
            region,
            lsn,
            arrived,
            op,
            is_delete if self.deletes == "fivetran" else None,
            arrived if is_delete and self.deletes == "airbyte" else None,
            is_delete if self.deletes == "flag(is_deleted)" else None,
        ]


def assert_equal_to_full(warehouse, deletes="debezium(op)", arrival=False) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        expected = multiset(con, full_customers(deletes, arrival))
        assert multiset(con, "SELECT * FROM main.v_customers") == expected
    finally:
        con.close()


@pytest.mark.parametrize("deletes", ["debezium(op)", "fivetran", "airbyte", "flag(is_deleted)"])
def test_updates_deletes_and_reinserts_are_deltas(tmp_path, deletes):
    project, warehouse = make_feed_project(tmp_path, feed_module(deletes))
    feed = Feed(warehouse, deletes)
    feed.write(("read", 1, "ann", "eu"), ("read", 2, "bob", "us"), ("insert", 3, "cy", "eu"))
    run_project(project, warehouse)
    histories = [
        [("update", 1, "ann2", "eu"), ("delete", 2)],  # an update and a delete
        [("insert", 2, "bob2", "us"), ("update", 3, "cy", "nowhere")],  # re-insert; out of the filter
        [
            ("update", 1, "ann3", "eu"),
            ("update", 1, "ann4", "us"),
            ("delete", 1),
            ("insert", 1, "ann5", "eu"),
        ],
        # A repeated delete of a key already filtered out: no row changes, the state stays.
        [("delete", 3), ("delete", 3)],
    ]
    for events, path in zip(histories, ["delta", "delta", "delta", "cutoff"], strict=True):
        feed.write(*events)
        outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
        assert outcome.path == path, (events, outcome.detail)
        assert outcome.detail["changed_keys"] == len({event[1] for event in events})
        assert_equal_to_full(warehouse, deletes)
    con = duckdb.connect(str(warehouse))
    assert con.execute("SELECT id, name FROM main.v_customers ORDER BY id").fetchall() == [
        (1, "ann5"),
        (2, "bob2"),
    ]
    con.close()
    assert verify(project, warehouse).is_equal


def test_events_out_of_order_without_an_arrival_column_build_in_full(tmp_path):
    """An event below the window's position cannot be told from the feed's old rows: the build is
    full, and says why."""
    project, warehouse = make_feed_project(tmp_path)
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"), ("insert", 2, "bob", "us"), ("update", 1, "ann2", "eu"))
    run_project(project, warehouse)
    feed.write(("update", 2, "late", "us", 1))  # position 1: before what the last build read
    plan = plan_project(project, warehouse, only_stale=True).model("customers")
    assert plan.path == "full" and "appeared at or below the watermark" in plan.reason
    outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
    assert outcome.path == "full" and "appeared at or below the watermark" in outcome.detail["full_reason"]
    assert_equal_to_full(warehouse)


def test_with_an_arrival_column_events_out_of_order_and_repeated_are_deltas(tmp_path):
    project, warehouse = make_feed_project(tmp_path, feed_module(arrival=True))
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"), ("insert", 2, "bob", "us"), ("update", 1, "ann3", "eu", 10))
    run_project(project, warehouse)
    # Late: position 5 for key 1 (older than its 10, so it loses) and 6 for key 2 (newest, wins);
    # then a repeated event and a delete that arrives after a later re-insert.
    steps = [
        [("update", 1, "stale", "eu", 5), ("update", 2, "bob2", "us", 6)],
        [("update", 2, "bob2", "us", 6), ("insert", 3, "cy", "eu", 20), ("delete", 3, None, None, 15)],
    ]
    for events in steps:
        feed.write(*events)
        planned = plan_project(project, warehouse, only_stale=True).model("customers")
        assert planned.path == "delta", planned.reason
        outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
        assert outcome.path == "delta", outcome.detail
        assert_equal_to_full(warehouse, arrival=True)
    con = duckdb.connect(str(warehouse))
    assert con.execute("SELECT id, name FROM main.v_customers ORDER BY id").fetchall() == [
        (1, "ann3"),
        (2, "bob2"),
        (3, "cy"),
    ]
    con.close()


def test_merge_keys_other_than_the_feeds_build_in_full(tmp_path):
    project, warehouse = make_feed_project(tmp_path)
    edit_module(project / "customers.strata", "merge_keys: [id]", "merge_keys: [id, region]")
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"))
    run_project(project, warehouse)
    feed.write(("update", 1, "ann", "us"))
    outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
    assert outcome.path == "full" and "not the feed's keys" in outcome.detail["full_reason"]
    assert_equal_to_full(warehouse)
