"""Property: day-partitioned aggregates over an upsert model, maintained from its delta (count,
count(*), exact sums, count(distinct), min and max, with NULL keys, values and partitions), equal a
full rebuild after every run, under random histories of new orders, amount and quantity changes
(NULL included), status changes moving orders out of and into the filter, customer changes moving
orders between groups, day moves, deletes and changes of the joined dimension; and they are
maintained from the delta whenever the joined dimension did not change, never for a float sum."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.builds.aggregate_delta import MAINTAINED
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.aggregate_delta_support import (
    MODELS,
    START,
    compare,
    make_project,
)
from strata_dagster_tests.support.incremental_support import compaction_thresholds

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

DAYS = 6
days = st.integers(min_value=0, max_value=DAYS - 1)
ids = st.integers(min_value=0, max_value=69)
customers = st.integers(min_value=0, max_value=9)
amounts = st.one_of(st.none(), st.integers(min_value=-3, max_value=15))

append = st.tuples(
    st.just("append"),
    st.lists(st.tuples(st.one_of(st.none(), days), customers, amounts), min_size=1, max_size=3),
)
amount = st.tuples(st.just("amount"), st.lists(ids, min_size=1, max_size=4), amounts)
qty = st.tuples(
    st.just("qty"), st.lists(ids, min_size=1, max_size=4), st.one_of(st.none(), st.integers(0, 4))
)
status = st.tuples(
    st.just("status"), st.lists(ids, min_size=1, max_size=4), st.sampled_from(["paid", "cancelled"])
)
customer = st.tuples(st.just("customer"), st.lists(ids, min_size=1, max_size=3), customers)
channel = st.tuples(st.just("channel"), st.lists(ids, min_size=1, max_size=3), st.sampled_from(["web", "tv"]))
move = st.tuples(st.just("move"), ids, st.one_of(st.none(), days))
delete = st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=5))
region = st.tuples(
    st.just("region"), st.lists(st.integers(0, 9), min_size=1, max_size=2), st.sampled_from(["n", "w"])
)
steps = st.lists(
    st.one_of(append, amount, qty, status, customer, channel, move, delete, region), min_size=1, max_size=7
)


def apply(con, step, clock):
    stamp = START + dt.timedelta(days=400, minutes=clock)
    kind = step[0]

    def update(assignment, ids, value):
        con.execute(
            f"UPDATE raw.orders SET {assignment} = ?, updated_at = ? WHERE list_contains(?, order_id)",
            [value, stamp, ids],
        )

    if kind == "append":
        for day, customer_id, value in step[1]:
            ts = None if day is None else START + dt.timedelta(days=day, hours=clock % 24)
            con.execute(
                "INSERT INTO raw.orders SELECT coalesce(max(order_id), 0) + 1, ?, ?, ?, 'paid', 'web', ?, 1, 0.25 "
                "FROM raw.orders",
                [customer_id, ts, stamp, value],
            )
    elif kind in ("amount", "qty", "status", "channel"):
        update(kind, step[1], step[2])
    elif kind == "customer":
        update("customer_id", step[1], step[2])
    elif kind == "move":
        ts = None if step[2] is None else START + dt.timedelta(days=step[2], hours=3)
        update("order_ts", [step[1]], ts)
    elif kind == "delete":
        con.execute("DELETE FROM raw.orders WHERE list_contains(?, order_id)", [step[1]])
    elif kind == "region":
        con.execute(
            "UPDATE raw.customers SET region = ? WHERE list_contains(?, customer_id)", [step[2], step[1]]
        )


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, is_eager=st.booleans())
def test_random_histories_of_maintained_aggregates_equal_a_full_rebuild(tmp_path_factory, history, is_eager):
    """`is_eager`: the input's segments (and the models' own) compacted at every chance."""
    with compaction_thresholds(is_eager):
        _random_history(tmp_path_factory, history)


def _random_history(tmp_path_factory, history):
    project, warehouse = make_project(tmp_path_factory.mktemp("aggregate_delta"))
    run_project(project, warehouse)
    for clock, step in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        apply(con, step, clock)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        built = {outcome.model: outcome for outcome in result.outcomes}
        con = duckdb.connect(str(warehouse))
        try:
            for model in MODELS:
                assert compare(con, model) == {"rows": 0, "groups": 0}, (model, step, built.get(model))
        finally:
            con.close()
        for model in MODELS:
            outcome = built.get(model)
            if outcome is None or outcome.path != "partitions":
                continue
            is_maintained = MAINTAINED in outcome.detail
            if model == "daily_float":
                assert not is_maintained, outcome.detail
            elif step[0] != "region" and model == "daily_all":
                assert is_maintained, (step, outcome.detail)
