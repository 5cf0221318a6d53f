"""Property: random appends, late updates, status changes and deletes across 60+ days; after every
run the day and month models equal a full rebuild (row counts, row-hash groups, numeric totals)."""

import datetime as dt

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster_tests.support.engine_support import replay_history
from strata_dagster_tests.support.incremental_support import compaction_thresholds
from strata_dagster_tests.support.partition_support import (
    EQUAL,
    MODULE,
    START,
    VIEW_MODELS,
    compare,
    compare_joined,
    make_seeded_joined_project,
    make_seeded_project,
)

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

DAYS = 75
days = st.integers(min_value=0, max_value=DAYS - 1)
ids = st.integers(min_value=0, max_value=299)

append = st.tuples(st.just("append"), st.lists(st.tuples(days, st.integers(1, 90)), min_size=1, max_size=6))
late_update = st.tuples(st.just("late_update"), st.lists(ids, min_size=1, max_size=6), st.integers(-20, 20))
status = st.tuples(
    st.just("status"), st.lists(ids, min_size=1, max_size=4), st.sampled_from(["paid", "cancelled"])
)
move = st.tuples(st.just("move"), ids, days)
delete = st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=4))
no_day = st.tuples(st.just("no_day"), st.integers(1, 90))  # a new row with a NULL order_ts
steps = st.lists(st.one_of(append, late_update, status, move, delete, no_day), min_size=1, max_size=6)


def apply(con, step, clock):
    stamp = START + dt.timedelta(days=400, minutes=clock)
    kind = step[0]
    if kind == "append":
        for day, amount in step[1]:
            con.execute(
                "INSERT INTO raw.orders SELECT coalesce(max(order_id), 0) + 1, ? + to_hours(?), ?, 'paid', 'web', ? FROM raw.orders",
                [START + dt.timedelta(days=day), clock % 24, stamp, amount],
            )
    elif kind == "late_update":
        con.execute(
            "UPDATE raw.orders SET amount = amount + ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[2], stamp, step[1]],
        )
    elif kind == "status":
        con.execute(
            "UPDATE raw.orders SET status = ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[2], stamp, step[1]],
        )
    elif kind == "move":
        con.execute(
            "UPDATE raw.orders SET order_ts = ? + to_hours(3), updated_at = ? WHERE order_id = ?",
            [START + dt.timedelta(days=step[2]), stamp, step[1]],
        )
    elif kind == "delete":
        con.execute("DELETE FROM raw.orders WHERE list_contains(?, order_id)", [step[1]])
    elif kind == "no_day":
        con.execute(
            "INSERT INTO raw.orders SELECT coalesce(max(order_id), 0) + 1, NULL, ?, 'paid', 'web', ? FROM raw.orders",
            [stamp, step[1]],
        )


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(updated_at)", "full"]), is_eager=st.booleans())
# A row of the NULL partition (id 300 is the first new row): written, changed, moved to a day.
@example(
    history=[("no_day", 5), ("late_update", [300], 3), ("move", 300, 4)], versioning="full", is_eager=False
)
@example(
    history=[("no_day", 5), ("move", 300, 4), ("delete", [300])], versioning="cdc(updated_at)", is_eager=True
)
def test_random_histories_equal_a_full_rebuild(tmp_path_factory, history, versioning, is_eager):
    """Both source fingerprints: the change column alone (the cdc contract) and whole rows;
    segments compacted as usual or at every chance (`is_eager`)."""
    with compaction_thresholds(is_eager):
        _random_history(tmp_path_factory, history, versioning)


def _random_history(tmp_path_factory, history, versioning):
    project, warehouse = make_seeded_project(tmp_path_factory.mktemp("partitions"), versioning)

    def check(con, step, result):
        for model in ("daily", "monthly", "by_ts"):
            assert compare(con, model) == EQUAL, (model, step, result.outcome(model))

    replay_history(project, warehouse, history, apply, check)


# Histories of changes to both the fact source and the customer dimension it is joined to.
customers = st.integers(min_value=1, max_value=30)
fact_append = st.tuples(
    st.just("append"), st.lists(st.tuples(days, customers, st.integers(1, 90)), min_size=1, max_size=5)
)
fact_update = st.tuples(st.just("amount"), st.lists(ids, min_size=1, max_size=5), st.integers(-20, 20))
fact_customer = st.tuples(st.just("reassign"), ids, customers)
fact_delete = st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=4))
dim_rename = st.tuples(st.just("rename"), customers)
dim_region = st.tuples(
    st.just("region"), st.lists(customers, min_size=1, max_size=3), st.sampled_from(["n", "s"])
)
dim_insert = st.tuples(st.just("insert"), customers, st.sampled_from(["n", "s", "e"]))
dim_delete = st.tuples(st.just("drop"), st.lists(customers, min_size=1, max_size=2))
joined_steps = st.lists(
    st.one_of(
        fact_append, fact_update, fact_customer, fact_delete, dim_rename, dim_region, dim_insert, dim_delete
    ),
    min_size=1,
    max_size=6,
)


def apply_joined(con, step, clock):
    stamp = START + dt.timedelta(days=400, minutes=clock)
    kind = step[0]
    if kind == "append":
        for day, customer, amount in step[1]:
            con.execute(
                "INSERT INTO raw.orders SELECT coalesce(max(order_id), 0) + 1, ?, ? + to_hours(?), ?, 'paid', ? "
                "FROM raw.orders",
                [customer, START + dt.timedelta(days=day), clock % 24, stamp, amount],
            )
    elif kind == "amount":
        con.execute(
            "UPDATE raw.orders SET amount = amount + ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[2], stamp, step[1]],
        )
    elif kind == "reassign":
        con.execute(
            "UPDATE raw.orders SET customer_id = ?, updated_at = ? WHERE order_id = ?",
            [step[2], stamp, step[1]],
        )
    elif kind == "delete":
        con.execute("DELETE FROM raw.orders WHERE list_contains(?, order_id)", [step[1]])
    elif kind == "rename":
        con.execute("UPDATE raw.customers SET name = name || 'x' WHERE customer_id = ?", [step[1]])
    elif kind == "region":
        con.execute(
            "UPDATE raw.customers SET region = ? WHERE list_contains(?, customer_id)", [step[2], step[1]]
        )
    elif kind == "insert":  # a new customer, or a second row for an existing one
        con.execute(
            "INSERT INTO raw.customers VALUES (?, 'new', ?, CASE WHEN ? = 'e' THEN 'business' ELSE 'consumer' END)",
            [step[1], step[2], step[2]],
        )
    elif kind == "drop":
        con.execute("DELETE FROM raw.customers WHERE list_contains(?, customer_id)", [step[1]])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=joined_steps)
def test_random_histories_of_facts_and_a_joined_dimension_equal_a_full_rebuild(tmp_path_factory, history):
    """Partitions reached by changed join keys (left `using`, inner `on`), cutoffs included."""
    project, warehouse = make_seeded_joined_project(tmp_path_factory.mktemp("joined"))

    def check(con, step, result):
        for model in ("region_daily", "segment_orders"):
            # Both joins are keyed: no change of either input rebuilds every partition.
            assert result.outcome(model).path != "full", (model, step, result.outcome(model).detail)
            assert compare_joined(con, model) == {"rows": 0, "groups": 0}, (
                model,
                step,
                result.outcome(model),
            )

    replay_history(project, warehouse, history, apply_joined, check)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(updated_at)", "full"]))
def test_random_histories_through_a_view_model_equal_a_full_rebuild(tmp_path_factory, history, versioning):
    """A day model over a `materialize: view` model: partitions found from the source's raw rows,
    the view never stored, the result equal to a full rebuild after every run."""
    project, warehouse = make_seeded_project(
        tmp_path_factory.mktemp("view_partitions"), versioning, MODULE + VIEW_MODELS
    )

    def check(con, step, result):
        assert compare(con, "daily_v") == EQUAL, (step, result.outcome("daily_v"))
        assert result.outcome("daily_v").path in ("partitions", "cutoff", "reused"), result.outcome("daily_v")

    replay_history(project, warehouse, history, apply, check, models=["daily_v"])
