"""Property: random histories of a change feed (inserts, updates, deletes, re-inserts, snapshot
reads, events out of order and repeated, compaction of old events) maintain a history model (by
position, or by checked columns, with or without a deleted flag) whose versions, after every run, equal their recomputation from the whole feed (row-hash multisets)."""

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster_tests.engine.sources.test_change_feeds import Feed
from strata_dagster_tests.support.incremental_support import multiset
from strata_dagster_tests.support.log_support import (
    DELETE_FORMS,
    full_history,
    history_module,
    make_feed_project,
)

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
events = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "delete", "read"]),  # read: a snapshot's row
        st.integers(min_value=0, max_value=4),
        st.sampled_from(["ann", "bob"]),
        st.sampled_from(["eu", "us"]),
        st.one_of(st.none(), st.integers(min_value=1, max_value=30)),  # an explicit (maybe old) position
        st.booleans(),  # written twice: a repeated event
    ),
    min_size=1,
    max_size=4,
)
steps = st.one_of(events, st.tuples(st.just("compact"), st.integers(min_value=1, max_value=10)))


def write(warehouse, feed: Feed, batch) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        if batch[0] == "compact":  # the log drops events at or below a position
            con.execute("DELETE FROM raw.customer_changes WHERE lsn <= ?", [batch[1]])
            return
        for kind, key, name, region, position, is_repeated in batch:
            event = (kind, key, None if kind == "delete" else name, None if kind == "delete" else region)
            row = feed.row(*event, position)
            con.executemany(
                "INSERT INTO raw.customer_changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [row] * (2 if is_repeated else 1),
            )
    finally:
        con.close()


@SETTINGS
@given(
    history=st.lists(steps, min_size=1, max_size=5),
    deletes=st.sampled_from(sorted(DELETE_FORMS)),
    arrival=st.booleans(),
    checked=st.sampled_from([None, "region", "name, region"]),
    flag=st.sampled_from([None, "was_deleted"]),
)
def test_history_models_equal_their_recomputation_from_the_feed(
    tmp_path_factory, history, deletes, arrival, checked, flag
):
    module = history_module(deletes, arrival, checked, flag)
    project, warehouse = make_feed_project(tmp_path_factory.mktemp("history"), module)
    feed = Feed(warehouse, deletes)
    feed.write(("insert", 0, "ann", "eu"), ("insert", 1, "bob", "us"))
    run_project(project, warehouse)
    has_compacted = False
    for batch in history:
        write(warehouse, feed, batch)
        outcome = run_project(project, warehouse, only_stale=True).outcome("customer_history")
        con = duckdb.connect(str(warehouse))
        try:
            expected = multiset(con, full_history(deletes, arrival, checked, flag))
            assert multiset(con, "SELECT * FROM main.v_customer_history") == expected, (batch, outcome.detail)
        finally:
            con.close()
        has_compacted = has_compacted or batch[0] == "compact"
        if arrival and not has_compacted:  # every event arrives after the last build: a delta
            assert outcome.path in ("delta", "cutoff"), outcome.detail
