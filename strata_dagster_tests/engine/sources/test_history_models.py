"""History models (`merge_strategy: history`) over a change feed: one row per version of each key,
valid from its position to the key's next one; deltas replace the versions of the keys a window
touched and equal the recomputation from the whole feed; merge keys other than the feed's are
refused (E092)."""

import duckdb
import pytest

from strata_dagster.engine.commands.unit_tests import run_unit_tests
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_DUPLICATE_COLUMN, E_HISTORY_SOURCE, E_UNKNOWN_COLUMN, StrataError
from strata_dagster_tests.engine.sources.test_change_feeds import Feed
from strata_dagster_tests.support.incremental_support import multiset
from strata_dagster_tests.support.log_support import full_history, history_module, make_feed_project


def path(project, warehouse) -> str:
    """How the run built the history model (full, delta, cutoff), with its detail on failure."""
    outcome = run_project(project, warehouse, only_stale=True).outcome("customer_history")
    return outcome.path


def history_rows(warehouse) -> list[tuple]:
    con = duckdb.connect(str(warehouse))
    try:
        return con.execute(
            "SELECT id, name, valid_from, valid_to, is_current FROM main.v_customer_history ORDER BY id, valid_from"
        ).fetchall()
    finally:
        con.close()


def assert_history_equal_to_full(
    warehouse, deletes="debezium(op)", arrival=False, checked=None, flag=None
) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        assert multiset(con, "SELECT * FROM main.v_customer_history") == multiset(
            con, full_history(deletes, arrival, checked, flag)
        )
    finally:
        con.close()


def test_versions_close_on_update_and_delete_and_reopen_on_reinsert(tmp_path):
    project, warehouse = make_feed_project(tmp_path, history_module())
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"), ("insert", 2, "bob", "us"))
    assert path(project, warehouse) == "full"
    feed.write(("update", 1, "anne", "eu"), ("delete", 2), ("insert", 2, "bobby", "us"))
    assert path(project, warehouse) == "delta"
    assert history_rows(warehouse) == [
        (1, "ann", 1, 3, False),
        (1, "anne", 3, None, True),
        (2, "bob", 2, 4, False),
        (2, "bobby", 5, None, True),
    ]
    assert_history_equal_to_full(warehouse)
    feed.write(("delete", 1))
    assert path(project, warehouse) == "delta"
    assert history_rows(warehouse)[:2] == [(1, "ann", 1, 3, False), (1, "anne", 3, 6, False)]
    assert_history_equal_to_full(warehouse)
    assert verify(project, warehouse).is_equal


@pytest.mark.parametrize("deletes", ["fivetran", "airbyte", "flag(is_deleted)"])
def test_each_delete_form_closes_versions(tmp_path, deletes):
    project, warehouse = make_feed_project(tmp_path, history_module(deletes))
    feed = Feed(warehouse, deletes)
    feed.write(("insert", 1, "ann", "eu"))
    run_project(project, warehouse)
    feed.write(("delete", 1), ("insert", 1, "ann", "us"))
    assert path(project, warehouse) == "delta"
    assert [row[2:] for row in history_rows(warehouse)] == [(1, 2, False), (3, None, True)]
    assert_history_equal_to_full(warehouse, deletes)


def test_checked_columns_open_versions_only_when_they_change(tmp_path):
    project, warehouse = make_feed_project(tmp_path, history_module(checked="region"))
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"))
    path(project, warehouse)
    feed.write(("update", 1, "anne", "eu"), ("update", 1, "anne", "us"))  # a name change is no version
    assert path(project, warehouse) == "delta"
    feed.write(("delete", 1), ("insert", 1, "anne", "us"))  # after a delete, equal values open one
    assert path(project, warehouse) == "delta"
    assert history_rows(warehouse) == [
        (1, "ann", 1, 3, False),
        (1, "anne", 3, 4, False),
        (1, "anne", 5, None, True),
    ]
    assert_history_equal_to_full(warehouse, checked="region")
    assert verify(project, warehouse).is_equal


def test_a_deleted_flag_marks_the_versions_a_delete_closed(tmp_path):
    project, warehouse = make_feed_project(tmp_path, history_module(flag="was_deleted"))
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"), ("insert", 2, "bob", "us"))
    run_project(project, warehouse)
    feed.write(("update", 1, "anne", "eu"), ("delete", 2))
    assert path(project, warehouse) == "delta"
    feed.write(("insert", 2, "bob", "eu"))
    assert path(project, warehouse) == "delta"
    flags = duckdb.connect(str(warehouse)).execute(
        "SELECT id, valid_from, valid_to, is_current, was_deleted FROM main.v_customer_history ORDER BY id, valid_from"
    )
    assert flags.fetchall() == [
        (1, 1, 3, False, False),
        (1, 3, None, True, False),
        (2, 2, 4, False, True),
        (2, 5, None, True, False),
    ]
    assert_history_equal_to_full(warehouse, flag="was_deleted")
    assert verify(project, warehouse).is_equal


def test_a_deleted_flag_outside_a_history_model_or_named_as_a_feed_column_is_refused(tmp_path):
    module = (
        history_module(flag="was_deleted")
        .replace("merge_strategy: history", "merge_strategy: upsert")
        .replace("lsn, valid_from, valid_to, is_current, was_deleted", "lsn")
    )
    project, warehouse = make_feed_project(tmp_path / "upsert", module)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE and "`deleted_flag`" in str(caught.value)
    project, warehouse = make_feed_project(tmp_path / "taken", history_module(flag="is_deleted"))
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_DUPLICATE_COLUMN


def test_check_columns_outside_a_history_model_or_the_feed_are_refused(tmp_path):
    module = (
        history_module(checked="region")
        .replace("merge_strategy: history", "merge_strategy: upsert")
        .replace("lsn, valid_from, valid_to, is_current", "lsn")
    )
    project, warehouse = make_feed_project(tmp_path / "upsert", module)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE
    project, warehouse = make_feed_project(tmp_path / "unknown", history_module(checked="regoin"))
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_UNKNOWN_COLUMN


def test_a_history_model_merged_by_other_keys_is_refused(tmp_path):
    module = history_module().replace("merge_keys: [id]", "merge_keys: [id, name]")
    project, warehouse = make_feed_project(tmp_path, module)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE


UNIT_TEST = """
test customer_history versions {
  given customer_changes [
    (id, name, region, lsn, op)
    (1, 'a', 'eu', 1, 'c')
    (1, 'b', 'eu', 2, 'u')
    (2, 'c', 'us', 3, 'c')
    (2, null, null, 4, 'd')
  ]
  expect [
    (id, name, region, lsn, valid_from, valid_to, is_current)
    (1, 'a', 'eu', 1, 1, 2, false)
    (1, 'b', 'eu', 2, 2, null, true)
    (2, 'c', 'us', 3, 3, 4, false)
  ]
}
"""


def test_a_unit_test_of_a_history_model_reads_its_fixture_feed_as_versions(tmp_path):
    project, warehouse = make_feed_project(tmp_path, history_module())
    (project / "tests.strata").write_text(UNIT_TEST)
    assert run_unit_tests(project, warehouse).is_passed
    (project / "tests.strata").write_text(
        UNIT_TEST.replace("(1, 'b', 'eu', 2, 2, null, true)", "(1, 'b', 'eu', 2, 2, null, false)")
    )
    report = run_unit_tests(project, warehouse)
    assert not report.is_passed
    assert report.failed[0].missing and report.failed[0].unexpected
