"""`test` blocks of models over a change feed: the given events are read as a build reads the feed,
each key's current row (its latest event, none when that deletes it), so the rows a real build of
the same events gives pass; with `previous` the given events are one window of an upsert by the
feed's keys, merged as an incremental build merges them; other steps over a feed are refused (E061)."""

import duckdb
import pytest
from hypothesis import example
from hypothesis import given as given_examples
from hypothesis import strategies as st

from strata_dagster.engine.commands.unit_tests import run_unit_tests
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_TEST_DEFINITION, StrataError
from strata_dagster_tests.engine.sources.test_change_feeds import Feed
from strata_dagster_tests.engine.sources.test_log_properties import SETTINGS, events
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.log_support import DELETE_FORMS, feed_module, make_feed_project
from strata_dagster_tests.support.unit_test_support import strata_test

EVENT_COLUMNS = (
    "id",
    "name",
    "region",
    "lsn",
    "synced_at",
    "op",
    "_fivetran_deleted",
    "_ab_cdc_deleted_at",
    "is_deleted",
)
COLUMNS = ("id", "name", "region", "lsn")


def step_module(deletes: str = "debezium(op)", arrival: bool = False) -> str:
    """The feed project, its upsert marked `incremental` (what a `previous` state needs)."""
    return feed_module(deletes, arrival).replace(
        "  merge_strategy: upsert", "  incremental\n  merge_strategy: upsert"
    )


def raw_events(warehouse) -> list[tuple]:
    return execute(warehouse, f"SELECT {', '.join(EVENT_COLUMNS)} FROM raw.customer_changes")


def built(warehouse) -> list[tuple]:
    return execute(warehouse, f"SELECT {', '.join(COLUMNS)} FROM main.v_customers ORDER BY ALL")


def write_events(warehouse, feed: Feed, batch) -> None:
    """Events as `test_log_properties.events` draws them: (kind, key, name, region, position or
    None for the next one, written twice)."""
    con = duckdb.connect(str(warehouse))
    try:
        for kind, key, name, region, position, is_repeated in batch:
            gone = kind == "delete"
            row = feed.row(kind, key, None if gone else name, None if gone else region, position)
            con.executemany(
                f"INSERT INTO raw.customer_changes VALUES ({', '.join('?' * len(EVENT_COLUMNS))})",
                [row] * (2 if is_repeated else 1),
            )
    finally:
        con.close()


def test_a_feed_test_reads_each_keys_current_row_as_a_build_does(tmp_path):
    project, warehouse = make_feed_project(tmp_path)
    feed = Feed(warehouse)
    feed.write(
        ("insert", 1, "ann", "eu"),
        ("insert", 2, "bob", "us"),
        ("update", 1, "ann2", "eu"),
        ("delete", 2),  # deleted: no row
        ("insert", 3, "cy", "eu"),
        ("delete", 3),
        ("insert", 3, "cy2", "us"),  # re-inserted after its delete
        ("update", 1, "late", "eu", 1),  # out of order: older than ann2
        ("insert", 4, "dee", "nowhere"),  # current, but filtered out
    )
    feed.write(("insert", 3, "cy2", "us", 7))  # the same event again
    run_project(project, warehouse)
    rows = built(warehouse)
    assert rows == [(1, "ann2", "eu", 3), (3, "cy2", "us", 7)]
    given = {"customer_changes": (EVENT_COLUMNS, raw_events(warehouse))}
    (project / "tests.strata").write_text(strata_test("customers", given, COLUMNS, rows))
    assert run_unit_tests(project, warehouse).is_passed
    # Without the warehouse the fixture's columns are the feed's (typed as written).
    short = ("id", "name", "region", "lsn", "op")
    given = {"customer_changes": (short, [event[:4] + event[5:6] for event in raw_events(warehouse)])}
    (project / "tests.strata").write_text(strata_test("customers", given, COLUMNS, rows))
    assert run_unit_tests(project, tmp_path / "absent.duckdb").is_passed
    # The deleted and superseded events are not the model's rows.
    every_event = [(1, "ann", "eu", 1), (1, "ann2", "eu", 3), (2, "bob", "us", 2), *rows]
    (project / "tests.strata").write_text(strata_test("customers", given, COLUMNS, every_event))
    report = run_unit_tests(project, tmp_path / "absent.duckdb")
    assert [row.values for row in report.failed[0].missing] == [
        ("1", "'ann'", "'eu'", "1"),
        ("1", "'ann2'", "'eu'", "3"),
        ("2", "'bob'", "'us'", "2"),
    ]


def test_a_fixture_without_the_feeds_delete_column_reads_no_deletes(tmp_path):
    """Without a warehouse, the feed's own columns a fixture leaves out are NULL: every event writes."""
    project, _ = make_feed_project(tmp_path, feed_module("fivetran"))
    given = {"customer_changes": (("id", "name", "region", "lsn"), [(1, "a", "eu", 1), (1, "b", "eu", 2)])}
    (project / "tests.strata").write_text(strata_test("customers", given, COLUMNS, [(1, "b", "eu", 2)]))
    assert run_unit_tests(project, tmp_path / "absent.duckdb").is_passed


JOINED = """
source orders {
  table: raw.orders
}

model order_regions {
  from orders
  join inner customer_changes on orders.customer_id = customer_changes.id
  select orders.order_id, customer_changes.name, customer_changes.region
}
"""


def test_a_feed_joined_to_a_models_from_relation_is_read_as_its_current_rows(tmp_path):
    project, warehouse = make_feed_project(tmp_path, feed_module() + JOINED)
    execute(
        warehouse,
        "CREATE TABLE raw.orders AS SELECT * FROM (VALUES (10, 1), (11, 2)) t(order_id, customer_id)",
    )
    Feed(warehouse).write(
        ("insert", 1, "ann", "eu"), ("insert", 2, "bob", "us"), ("update", 1, "ann2", "us"), ("delete", 2)
    )
    run_project(project, warehouse)
    rows = execute(warehouse, "SELECT order_id, name, region FROM main.v_order_regions")
    assert rows == [(10, "ann2", "us")]
    given = {
        "orders": (("order_id", "customer_id"), [(10, 1), (11, 2)]),
        "customer_changes": (EVENT_COLUMNS, raw_events(warehouse)),
    }
    (project / "tests.strata").write_text(
        strata_test("order_regions", given, ("order_id", "name", "region"), rows)
    )
    assert run_unit_tests(project, warehouse).is_passed


@SETTINGS
@given_examples(
    history=st.lists(events, min_size=1, max_size=4),
    deletes=st.sampled_from(sorted(DELETE_FORMS)),
    arrival=st.booleans(),
)
@example(
    history=[[("delete", 1, "ann", "eu", None, True), ("insert", 1, "bob", "us", 1, False)]],
    deletes="airbyte",
    arrival=True,
)
def test_a_feed_test_of_any_feed_expects_what_a_build_gives(tmp_path_factory, history, deletes, arrival):
    """Random events (inserts, updates, deletes, re-inserts, out of order, repeated), built run by
    run: a test block giving all of them and expecting the built rows passes."""
    project, warehouse = make_feed_project(tmp_path_factory.mktemp("feed"), feed_module(deletes, arrival))
    feed = Feed(warehouse, deletes)
    for batch in history:
        write_events(warehouse, feed, batch)
        run_project(project, warehouse, only_stale=True)
    given = {"customer_changes": (EVENT_COLUMNS, raw_events(warehouse))}
    (project / "tests.strata").write_text(strata_test("customers", given, COLUMNS, built(warehouse)))
    report = run_unit_tests(project, warehouse)
    assert report.is_passed, report.as_json()


def test_an_upsert_step_over_a_feed_merges_the_windows_events_as_a_build_does(tmp_path):
    project, warehouse = make_feed_project(tmp_path, step_module())
    feed = Feed(warehouse)
    feed.write(
        ("insert", 1, "ann", "eu"),
        ("insert", 2, "bob", "us"),
        ("insert", 3, "cy", "eu"),
        ("delete", 3),
        ("insert", 4, "dee", "us"),
        ("insert", 5, "eve", "eu"),
    )
    run_project(project, warehouse)
    previous = built(warehouse)
    before = len(raw_events(warehouse))
    write_events(
        warehouse,
        feed,
        [
            ("update", 1, "ann3", "eu", 12, False),
            ("update", 1, "ann2", "eu", 11, False),  # out of order in the window: ann3 stays
            ("delete", 2, None, None, 9, False),
            ("insert", 3, "cy2", "us", 10, True),  # re-inserted, the event repeated
            ("update", 4, "dee", "nowhere", 13, False),  # updated out of the filter: leaves the state
            ("insert", 6, "fay", "us", 14, False),
        ],
    )
    outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
    assert outcome.path == "delta", outcome.detail
    rows = built(warehouse)
    assert rows == [(1, "ann3", "eu", 12), (3, "cy2", "us", 10), (5, "eve", "eu", 6), (6, "fay", "us", 14)]
    window = {"customer_changes": (EVENT_COLUMNS, raw_events(warehouse)[before:])}
    (project / "tests.strata").write_text(
        strata_test("customers", window, COLUMNS, rows, (COLUMNS, previous))
    )
    assert run_unit_tests(project, warehouse).is_passed
    # Reading the window's events as rows would keep ann2, the deleted key and the repeat.
    wrong = [*rows, (1, "ann2", "eu", 11)]
    (project / "tests.strata").write_text(
        strata_test("customers", window, COLUMNS, wrong, (COLUMNS, previous))
    )
    report = run_unit_tests(project, warehouse)
    assert [row.values for row in report.failed[0].missing] == [("1", "'ann2'", "'eu'", "11")]


window_events = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "delete", "read"]),
        st.integers(min_value=0, max_value=5),
        st.sampled_from(["ann", "bob", "cy"]),
        st.sampled_from(["eu", "us", "nowhere"]),
        st.integers(min_value=1, max_value=12),  # after the first build's events, in any order
        st.booleans(),  # written twice: a repeated event
    ),
    min_size=1,
    max_size=8,
)


@SETTINGS
@given_examples(
    first=st.lists(events, min_size=1, max_size=3),
    window=window_events,
    deletes=st.sampled_from(sorted(DELETE_FORMS)),
    arrival=st.booleans(),
)
@example(
    first=[[("insert", 1, "ann", "eu", None, False), ("delete", 1, "ann", "eu", None, False)]],
    window=[("insert", 1, "bob", "us", 2, False), ("delete", 1, "ann", "eu", 1, True)],
    deletes="debezium(op)",
    arrival=False,
)
def test_an_upsert_step_over_any_window_expects_the_next_build(
    tmp_path_factory, first, window, deletes, arrival
):
    """Two builds, the second over a window of events (updates, deletes, re-inserts, out of order
    and repeated, each after the key's events before the window): a test block with the first
    build's rows as `previous` and the window's events as `given` expects the second build's rows."""
    project, warehouse = make_feed_project(tmp_path_factory.mktemp("step"), step_module(deletes, arrival))
    feed = Feed(warehouse, deletes)
    for batch in first:
        write_events(warehouse, feed, batch)
        run_project(project, warehouse, only_stale=True)
    previous = built(warehouse)
    before = raw_events(warehouse)
    last = max(event[3] for event in before)
    write_events(warehouse, feed, [(*event[:4], last + event[4], event[5]) for event in window])
    outcome = run_project(project, warehouse, only_stale=True).outcome("customers")
    assert outcome.path in ("delta", "cutoff"), outcome.detail
    given = {"customer_changes": (EVENT_COLUMNS, raw_events(warehouse)[len(before) :])}
    test = strata_test("customers", given, COLUMNS, built(warehouse), (COLUMNS, previous))
    (project / "tests.strata").write_text(test)
    report = run_unit_tests(project, warehouse)
    assert report.is_passed, report.as_json()


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (
            "model kept {\n  from customer_changes\n  select id, name, lsn\n  incremental\n"
            "  merge_strategy: append\n  cdc_column: lsn\n}\n",
            "only an upsert by the feed's keys is maintained from a window",
        ),
        (
            "model kept {\n  from customer_changes\n  select id, name, lsn\n  incremental\n"
            "  merge_strategy: append_new\n  merge_keys: [id]\n  cdc_column: lsn\n}\n",
            "only an upsert by the feed's keys is maintained from a window",
        ),
        (
            "model kept {\n  from customer_changes\n  select id, name, lsn\n  incremental\n"
            "  merge_strategy: upsert\n  merge_keys: [id, name]\n  cdc_column: lsn\n}\n",
            "its merge keys are not the feed's keys (id) passed through unchanged",
        ),
    ],
)
def test_a_step_the_engine_builds_in_full_over_a_feed_is_refused(tmp_path, model, why):
    """Over a change feed the engine builds append, append_new and upserts by other keys in full
    over the feed's current rows: a `previous` state has no meaning there (E061)."""
    project, warehouse = make_feed_project(tmp_path, feed_module() + model)
    given = {"customer_changes": (("id", "name", "lsn"), [(1, "a", 1)])}
    (project / "tests.strata").write_text(
        strata_test("kept", given, ("id",), [(1,)], (("id", "name", "lsn"), []), name="step")
    )
    with pytest.raises(StrataError) as caught:
        run_unit_tests(project, warehouse)
    assert caught.value.code == E_TEST_DEFINITION
    assert why in str(caught.value)
    assert "drop `previous`: give all of `customer_changes`'s events" in str(caught.value.errors[0].hint)
    # The same model tested as a full build reads the feed's current rows.
    (project / "tests.strata").write_text(strata_test("kept", given, ("id",), [(1,)], name="full"))
    assert run_unit_tests(project, warehouse).is_passed
