"""Property: plain models over other models, maintained from their inputs' new segments (row-wise by
the input's key, window functions by their PARTITION BY, a union all of append inputs) and a day
model over an upsert model equal a full rebuild after every run, under random histories of
appends, updates, filter moves, key moves between window partitions, day moves, deletes, late rows
and a joined dimension's changes; none is built in full unless an input's segments do not say what
changed (it was rebuilt in full itself), and then history says so."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.run import run_project
from strata_dagster.state.history import HistoryReader
from strata_dagster_tests.support.incremental_support import compaction_thresholds
from strata_dagster_tests.support.model_slices_support import SLICED_MODELS, START, compare, make_project

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

DAYS = 30
days = st.integers(min_value=0, max_value=DAYS - 1)
ids = st.integers(min_value=0, max_value=119)
# 10..13 have no customer row; NULL is a window partition of its own and joins no customer.
customers = st.one_of(st.integers(min_value=0, max_value=13), st.none())

append = st.tuples(
    st.just("append"), st.lists(st.tuples(days, customers, st.integers(1, 60)), min_size=1, max_size=4)
)
late_row = st.tuples(st.just("late_row"), days, st.integers(1, 60))  # stamped below every stamp so far
amount = st.tuples(st.just("amount"), st.lists(ids, min_size=1, max_size=5), st.integers(-20, 20))
status = st.tuples(
    st.just("status"), st.lists(ids, min_size=1, max_size=4), st.sampled_from(["paid", "cancelled"])
)
customer = st.tuples(
    st.just("customer"), st.lists(ids, min_size=1, max_size=3), customers
)  # window key moves
move = st.tuples(st.just("move"), ids, days)
delete = st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=4))
region = st.tuples(
    st.just("region"), st.lists(st.integers(0, 9), min_size=1, max_size=3), st.sampled_from(["n", "e"])
)
steps = st.lists(
    st.one_of(append, late_row, amount, status, customer, move, delete, region), min_size=1, max_size=6
)

# Why a model over another may be built in full: that input's change is not a list of new segments
# (an upsert input rebuilt in full after a late row, say).
CHAIN_BROKEN = "was rebuilt, compacted or rolled back since the last build"


def recorded_fingerprints(con, model):
    """The figures the model's live state answers with: its own, or those an early cutoff kept."""
    reader = HistoryReader(con)
    head = reader.snapshot(reader.pointers(DEFAULT_BRANCH)[model][-1])
    recorded = reader.with_kept_facts(head, DEFAULT_BRANCH).detail["partition_fingerprints"]
    return {key: (count, str(total)) for key, (count, total) in recorded.items()}


def input_fingerprints(con):
    rows = con.execute(
        "SELECT CAST(CAST(order_day AS DATE) AS VARCHAR), count(*), sum(CAST(hash(r) AS HUGEINT)) "
        "FROM main.v_stg AS r GROUP BY 1"
    ).fetchall()
    return {key: (count, str(total)) for key, count, total in rows}


def apply(con, step, clock):
    stamp = START + dt.timedelta(days=400, minutes=clock)
    kind = step[0]
    if kind == "append":
        for day, customer_id, value in step[1]:
            con.execute(
                "INSERT INTO raw.orders SELECT coalesce(max(order_id), 0) + 1, ?, ? + to_hours(?), ?, 'paid', "
                "'web', ? FROM raw.orders",
                [customer_id, START + dt.timedelta(days=day), clock % 24, stamp, value],
            )
    elif kind == "late_row":
        ts = START + dt.timedelta(days=step[1], hours=clock % 24)
        late = START - dt.timedelta(days=1, minutes=clock)
        con.execute(
            "INSERT INTO raw.orders SELECT coalesce(max(order_id), 0) + 1, 3, ?, ?, 'paid', 'shop', ? FROM raw.orders",
            [ts, late, step[2]],
        )
    elif kind == "amount":
        con.execute(
            "UPDATE raw.orders SET amount = greatest(amount + ?, 1), updated_at = ? WHERE list_contains(?, order_id)",
            [step[2], stamp, step[1]],
        )
    elif kind == "status":
        con.execute(
            "UPDATE raw.orders SET status = ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[2], stamp, step[1]],
        )
    elif kind == "customer":
        con.execute(
            "UPDATE raw.orders SET customer_id = ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[2], stamp, step[1]],
        )
    elif kind == "move":
        con.execute(
            "UPDATE raw.orders SET order_ts = ? + to_hours(3), updated_at = ? WHERE order_id = ?",
            [START + dt.timedelta(days=step[2]), stamp, step[1]],
        )
    elif kind == "delete":
        con.execute("DELETE FROM raw.orders WHERE list_contains(?, order_id)", [step[1]])
    elif kind == "region":
        con.execute(
            "UPDATE raw.customers SET region = ? WHERE list_contains(?, customer_id)", [step[2], step[1]]
        )


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, is_eager=st.booleans())
# Orders of no customer (NULL): a new one, then existing ones moved into and out of that partition.
@example(
    history=[("append", [(3, None, 20)]), ("customer", [5, 6], None), ("customer", [5], 2)], is_eager=False
)
@example(history=[("customer", [7], None), ("region", [7], "e"), ("delete", [7])], is_eager=True)
def test_random_histories_of_models_over_models_equal_a_full_rebuild(tmp_path_factory, history, is_eager):
    """`is_eager`: the inputs' segments (and the models' own) compacted at every chance."""
    with compaction_thresholds(is_eager):
        _random_history(tmp_path_factory, history)


def _random_history(tmp_path_factory, history):
    project, warehouse = make_project(tmp_path_factory.mktemp("model_slices"))
    run_project(project, warehouse)
    for clock, step in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        apply(con, step, clock)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        built = {outcome.model: outcome for outcome in result.outcomes}
        con = duckdb.connect(str(warehouse))
        try:
            for model in SLICED_MODELS:
                outcome = built.get(model)
                assert compare(con, model) == {"rows": 0, "groups": 0}, (model, step, outcome)
                if outcome is not None and outcome.path == "full":
                    assert CHAIN_BROKEN in str(outcome.detail.get("full_reason")), (
                        model,
                        step,
                        outcome.detail,
                    )
            # The day model's per-partition input figures, kept from its input's segments, are
            # exactly the figures of the input's rows now (what its stale partitions are read from).
            assert recorded_fingerprints(con, "daily") == input_fingerprints(con), step
        finally:
            con.close()
