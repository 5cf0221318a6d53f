"""Property: plain row-wise models over a cdc source and a partitioned source, maintained by the
slices whose source rows changed, equal a full rebuild after every run (appends, updates, deletes,
filter moves, late rows, a joined dimension's changes), and so does a day model over one of them."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.incremental_support import compaction_thresholds
from strata_dagster_tests.support.row_wise_support import ROW_WISE_MODELS, START, compare, make_project

# Also run at the lowest versions pyproject.toml admits (.ci/run); history details in files (conftest.py).
pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("detail_in_files")]

DAYS = 50
days = st.integers(min_value=0, max_value=DAYS - 1)
ids = st.integers(min_value=0, max_value=199)
tables = st.sampled_from(["orders", "placed"])

append = st.tuples(
    st.just("append"), tables, st.lists(st.tuples(days, st.integers(1, 60)), min_size=1, max_size=4)
)
late_row = st.tuples(st.just("late_row"), tables, days, st.integers(1, 60))  # stamped in the past
update = st.tuples(st.just("amount"), tables, st.lists(ids, min_size=1, max_size=5), st.integers(-20, 20))
status = st.tuples(
    st.just("status"), tables, st.lists(ids, min_size=1, max_size=4), st.sampled_from(["paid", "cancelled"])
)
move = st.tuples(st.just("move"), tables, ids, days)
delete = st.tuples(st.just("delete"), tables, st.lists(ids, min_size=1, max_size=4))
region = st.tuples(
    st.just("region"), st.lists(st.integers(0, 24), min_size=1, max_size=3), st.sampled_from(["n", "e"])
)
# A new row with no slice: NULL in the partition column, or in the change column (never in a window).
null_slice = st.tuples(
    st.just("null_slice"), tables, st.sampled_from(["order_ts", "updated_at"]), st.integers(1, 60)
)
steps = st.lists(
    st.one_of(append, late_row, update, status, move, delete, region, null_slice), min_size=1, max_size=5
)


def apply(con, step, clock):
    stamp = START + dt.timedelta(days=400, minutes=clock)
    kind = step[0]
    table = step[1]
    if kind == "append":
        for day, amount in step[2]:
            con.execute(
                f"INSERT INTO raw.{table} SELECT coalesce(max(order_id), 0) + 1, ? % 25, ? + to_hours(?), ?, 'paid', "
                f"'web', ? FROM raw.{table}",
                [amount, START + dt.timedelta(days=day), clock % 24, stamp, amount],
            )
    elif kind == "late_row":
        ts = START + dt.timedelta(days=step[2], hours=clock % 24)
        # On the cdc table the row is stamped below every stamp so far, so its fingerprint (count and
        # range, the cdc contract) sees it: a stamp inside the range after a delete gives the source
        # the fingerprint of an earlier state, which the contract cannot tell apart (`verify` can).
        stamp = START - dt.timedelta(days=1, minutes=clock) if table == "orders" else ts
        con.execute(
            f"INSERT INTO raw.{table} SELECT coalesce(max(order_id), 0) + 1, 3, ?, ?, 'paid', 'shop', ? FROM raw.{table}",
            [ts, stamp, step[3]],
        )
    elif kind == "amount":
        con.execute(
            f"UPDATE raw.{table} SET amount = amount + ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[3], stamp, step[2]],
        )
    elif kind == "status":
        con.execute(
            f"UPDATE raw.{table} SET status = ?, updated_at = ? WHERE list_contains(?, order_id)",
            [step[3], stamp, step[2]],
        )
    elif kind == "move":
        con.execute(
            f"UPDATE raw.{table} SET order_ts = ? + to_hours(3), updated_at = ? WHERE order_id = ?",
            [START + dt.timedelta(days=step[3]), stamp, step[2]],
        )
    elif kind == "delete":
        con.execute(f"DELETE FROM raw.{table} WHERE list_contains(?, order_id)", [step[2]])
    elif kind == "null_slice":
        values = {"order_ts": START + dt.timedelta(days=clock % DAYS), "updated_at": stamp, step[2]: None}
        con.execute(
            f"INSERT INTO raw.{table} SELECT coalesce(max(order_id), 0) + 1, 4, ?, ?, 'paid', 'web', ? FROM raw.{table}",
            [values["order_ts"], values["updated_at"], step[3]],
        )
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
# Rows with no slice (id 200 is the first new row): written, then stamped or deleted.
@example(history=[("null_slice", "orders", "updated_at", 5), ("amount", "orders", [200], 3)], is_eager=False)
@example(
    history=[("null_slice", "orders", "order_ts", 5), ("status", "orders", [200], "cancelled")], is_eager=True
)
@example(history=[("null_slice", "placed", "order_ts", 5), ("delete", "placed", [200])], is_eager=False)
def test_random_histories_of_row_wise_models_equal_a_full_rebuild(tmp_path_factory, history, is_eager):
    """`is_eager`: segments compacted at every chance."""
    with compaction_thresholds(is_eager):
        _random_history(tmp_path_factory, history)


def _random_history(tmp_path_factory, history):
    project, warehouse = make_project(tmp_path_factory.mktemp("row_wise"))
    run_project(project, warehouse)
    for clock, step in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        apply(con, step, clock)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        con = duckdb.connect(str(warehouse))
        try:
            for model in (*ROW_WISE_MODELS, "daily"):
                outcome = result.outcome(model) if model in {o.model for o in result.outcomes} else None
                assert compare(con, model) == {"rows": 0, "groups": 0}, (model, step, outcome)
                # Never a full rebuild: every change reaches only the slices it touched.
                assert outcome is None or outcome.path != "full", (model, step, outcome)
        finally:
            con.close()
