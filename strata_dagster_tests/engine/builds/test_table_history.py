"""History models over a plain table (no ledger, no change feed): each build compares the table's
rows with the current versions, closes those that changed or left at the build's time (flagged
deleted when they left) and opens the rows now; `strata plan` says they cannot be recomputed
from a log, and `strata verify` checks what a table can prove instead of a full rebuild."""

import datetime as dt

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster.cli.main import main
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_HISTORY_SOURCE, StrataError
from strata_dagster_tests.support.engine_support import execute, make_module_project
from strata_dagster_tests.support.log_support import TABLE_HISTORY_MODULE as MODULE

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def make_project(tmp_path, module=MODULE):
    return make_module_project(
        tmp_path,
        "customers.strata",
        module,
        "CREATE TABLE raw.customers (id BIGINT, name VARCHAR, region VARCHAR)",
    )


def build(project, warehouse, day: int):
    return run_project(project, warehouse, only_stale=True, now=T0 + dt.timedelta(days=day)).outcome(
        "customer_history"
    )


def versions(warehouse) -> list[tuple]:
    return execute(
        warehouse,
        "SELECT id, name, day(valid_from), day(valid_to), is_current, was_deleted FROM main.v_customer_history "
        "ORDER BY id, valid_from",
    )


def test_each_build_closes_changed_and_left_rows_and_opens_their_rows_now(tmp_path):
    project, warehouse = make_project(tmp_path)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu'), (2, 'bob', 'us'), (3, 'cy', 'eu')")
    assert build(project, warehouse, 0).path == "full"
    execute(
        warehouse,
        "UPDATE raw.customers SET name = 'anne' WHERE id = 1",
        "DELETE FROM raw.customers WHERE id = 2",
        "UPDATE raw.customers SET region = 'nowhere' WHERE id = 3",  # filtered out: it leaves the model
        "INSERT INTO raw.customers VALUES (4, 'dee', 'us')",
    )
    outcome = build(project, warehouse, 1)
    assert outcome.path == "delta", outcome.detail
    assert outcome.detail["changed_keys"] == 4
    assert versions(warehouse) == [
        (1, "ann", 1, 2, False, False),
        (1, "anne", 2, None, True, False),
        (2, "bob", 1, 2, False, True),
        (3, "cy", 1, 2, False, True),
        (4, "dee", 2, None, True, False),
    ]
    execute(warehouse, "INSERT INTO raw.customers VALUES (2, 'bob', 'us')")  # back: a new version
    assert build(project, warehouse, 2).path == "delta"
    assert versions(warehouse)[2:4] == [(2, "bob", 1, 2, False, True), (2, "bob", 3, None, True, False)]
    assert verify(project, warehouse).is_equal


def test_unchanged_rows_keep_the_live_state(tmp_path):
    project, warehouse = make_project(tmp_path)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu')")
    build(project, warehouse, 0)
    execute(warehouse, "UPDATE raw.customers SET name = 'ann' WHERE id = 1")  # rewritten, equal
    assert build(project, warehouse, 1).path == "reused"
    execute(warehouse, "INSERT INTO raw.customers VALUES (2, 'bob', 'nowhere')")  # filtered out
    assert build(project, warehouse, 2).path == "cutoff"
    assert versions(warehouse) == [(1, "ann", 1, None, True, False)]


def test_checked_columns_open_versions_only_when_they_change(tmp_path):
    module = MODULE.replace(
        "  deleted_flag: was_deleted\n", "  deleted_flag: was_deleted\n  check_columns: [region]\n"
    )
    project, warehouse = make_project(tmp_path, module)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu')")
    build(project, warehouse, 0)
    execute(warehouse, "UPDATE raw.customers SET name = 'anne'")
    assert build(project, warehouse, 1).path == "cutoff"
    execute(warehouse, "UPDATE raw.customers SET region = 'us'")
    assert build(project, warehouse, 2).path == "delta"
    assert [row[1:5] for row in versions(warehouse)] == [("ann", 1, 3, False), ("anne", 3, None, True)]


def test_plan_says_a_table_history_cannot_be_recomputed(tmp_path):
    project, warehouse = make_project(tmp_path)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu')")
    planned = plan_project(project, warehouse).model("customer_history")
    assert any("cannot be recomputed from a log" in note for note in planned.notes)
    build(project, warehouse, 0)
    execute(warehouse, "UPDATE raw.customers SET name = 'anne'")
    planned = plan_project(project, warehouse, only_stale=True).model("customer_history")
    assert planned.path == "delta"
    assert any("cannot be recomputed from a log" in note for note in planned.notes)


def test_verify_checks_current_rows_intervals_and_one_current_version_per_key(tmp_path):
    project, warehouse = make_project(tmp_path)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu'), (2, 'bob', 'us')")
    build(project, warehouse, 0)
    execute(warehouse, "UPDATE raw.customers SET name = 'anne' WHERE id = 1")
    build(project, warehouse, 1)
    report = verify(project, warehouse)
    assert report.is_equal
    (model,) = report.models
    assert model.table_history is not None and model.compared_columns == ("id", "name", "region")
    # The table changed since the last build: its current versions no longer are its rows.
    execute(warehouse, "UPDATE raw.customers SET name = 'bobby' WHERE id = 2")
    (model,) = verify(project, warehouse).models
    assert not model.is_equal and model.figures.rows_in_mismatched_hash_groups == 2
    assert model.table_history is not None and model.table_history.is_equal
    # A build with the clock set back closes bob's version before it opened.
    build(project, warehouse, -3)
    (model,) = verify(project, warehouse).models
    assert model.figures.is_equal and model.table_history is not None
    assert model.table_history.bad_intervals == 1  # closed before it opened, overlapping the next one
    assert not model.is_equal


def test_verify_finds_a_key_with_two_current_versions(tmp_path):
    """A table without a unique key gives a key two rows: both are current versions."""
    project, warehouse = make_project(tmp_path)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu')")
    build(project, warehouse, 0)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'anne', 'us')")
    build(project, warehouse, 1)
    (model,) = verify(project, warehouse).models
    assert model.figures.is_equal
    assert model.table_history is not None and model.table_history.keys_not_one_current == 1
    assert not model.is_equal
    assert model.as_metadata()["keys_with_several_current_versions"] == 1
    shown = CliRunner().invoke(main, ["verify", str(project), "--warehouse", str(warehouse)])
    assert shown.exit_code == 1, shown.output
    assert "1 key(s) with several current versions" in " ".join(shown.output.split())


def test_a_table_history_must_select_its_history_and_checked_columns(tmp_path):
    module = MODULE.replace("valid_to, is_current", "valid_to, NOT is_current AS is_current")
    project, warehouse = make_project(tmp_path, module)
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu')")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE and "`is_current` unchanged" in str(caught.value)
    module = MODULE.replace(
        "  deleted_flag: was_deleted\n", "  deleted_flag: was_deleted\n  check_columns: [region]\n"
    )
    project, warehouse = make_project(
        tmp_path / "checked", module.replace("select id, name, region,", "select id, name,")
    )
    execute(warehouse, "INSERT INTO raw.customers VALUES (1, 'ann', 'eu')")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE and "checking `region`" in str(caught.value)


def test_a_history_of_a_model_is_refused(tmp_path):
    module = MODULE.replace("from customers", "from staged") + "\nmodel staged {\n  from customers\n}\n"
    project, warehouse = make_project(tmp_path, module)
    with pytest.raises(StrataError) as caught:
        plan_project(project, warehouse)
    assert caught.value.code == E_HISTORY_SOURCE


edits = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete"]),
        st.integers(min_value=0, max_value=4),
        st.sampled_from(["ann", "bob"]),
        st.sampled_from(["eu", "us", "nowhere"]),
    ),
    min_size=0,
    max_size=4,
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(edits, min_size=1, max_size=4), checked=st.booleans())
@example(
    history=[[("upsert", 0, "bob", "eu")], [("upsert", 0, "ann", "eu")]], checked=False
)  # a key back to a name
def test_table_histories_equal_the_versions_of_their_snapshots(tmp_path_factory, history, checked):
    """Random edits of the table, a build after each: the history equals the versions a reference
    takes from the table's state at each build (its rows that pass the filter, by key), and
    `strata verify` passes."""
    module = MODULE.replace(
        "  deleted_flag: was_deleted\n", "  deleted_flag: was_deleted\n  check_columns: [region]\n"
    )
    project, warehouse = make_project(tmp_path_factory.mktemp("table"), module if checked else MODULE)
    table: dict[int, tuple[str, str]] = {0: ("ann", "eu")}
    execute(warehouse, "INSERT INTO raw.customers VALUES (0, 'ann', 'eu')")
    expected: list[list] = []  # [id, name, region, from, to, deleted]
    for day, batch in enumerate([[], *history]):
        for kind, key, name, region in batch:
            execute(warehouse, "DELETE FROM raw.customers WHERE id = ?", params=[key])
            table.pop(key, None)
            if kind == "upsert":
                execute(warehouse, "INSERT INTO raw.customers VALUES (?, ?, ?)", params=[key, name, region])
                table[key] = (name, region)
        now = {key: row for key, row in table.items() if row[1] != "nowhere"}
        current = {version[0]: version for version in expected if version[4] is None}
        for key, version in current.items():
            if key not in now or (now[key][1] if checked else now[key]) != (
                version[2] if checked else (version[1], version[2])
            ):
                version[4], version[5] = day, key not in now
        for key, row in now.items():
            if key not in current or current[key][4] is not None:
                expected.append([key, *row, day, None, False])
        build(project, warehouse, day)
        assert versions(warehouse) == sorted(
            (
                (key, name, day_from + 1, None if to is None else to + 1, to is None, deleted)
                for key, name, _, day_from, to, deleted in expected
            ),
            key=lambda version: (version[0], version[2]),  # the query's order: by id, valid_from
        )
        assert verify(project, warehouse).is_equal
