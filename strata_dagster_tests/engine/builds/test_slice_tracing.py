"""A row-wise model whose output carries the day or month of its slice column through a `let`
(`cast(ts as date)`, `date_trunc('month', ts)`) and drops the column itself is maintained by
those slices (engine/slice_tracing.py): it takes the partitions path, `strata plan` says so, and
it equals a full rebuild under random histories."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings

from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster_tests.engine.builds.test_row_wise_properties import apply, steps
from strata_dagster_tests.support.engines_support import engine_under_test, spark_params
from strata_dagster_tests.support.partition_support import compare_with_full
from strata_dagster_tests.support.row_wise_support import START, make_project

MODULE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

source placed {
  table: raw.placed
  partitioned_by: day(order_ts)
  start: 2026-01-01
}

source customers {
  table: raw.customers
}

-- The cdc column's day, the raw column dropped.
model by_change_day {
  from orders
  let change_day = cast(updated_at as date)
  select order_id, change_day, status, amount
}

-- The partition column's month, the raw column dropped: sliced by months of the day partitions.
model by_month {
  from placed
  filter status <> 'cancelled'
  let placed_month = date_trunc('month', order_ts)
  select order_id, placed_month, amount
}
"""

FULL = {
    "by_change_day": "SELECT order_id, CAST(updated_at AS DATE) AS change_day, status, amount FROM raw.orders",
    "by_month": "SELECT order_id, date_trunc('month', order_ts) AS placed_month, amount FROM raw.placed "
    "WHERE status <> 'cancelled'",
}


def test_a_slice_day_computed_by_a_let_takes_the_partitions_path(tmp_path):
    project, warehouse = make_project(tmp_path, MODULE)
    first = run_project(project, warehouse)
    assert first.outcome("by_change_day").detail["row_wise"] == "day(change_day)"
    assert first.outcome("by_month").detail["row_wise"] == "month(placed_month)"
    con = duckdb.connect(str(warehouse))
    apply(con, ("amount", "orders", [3, 4], 5), 1)
    apply(con, ("amount", "placed", [3], 5), 1)
    con.close()
    planned = plan_project(project, warehouse, only_stale=True)
    assert planned.model("by_change_day").path == "partitions"
    assert planned.model("by_month").path == "partitions"
    assert planned.model("by_month").partition_keys == ("2026-01-01",)
    result = run_project(project, warehouse, only_stale=True)
    for model in FULL:
        assert result.outcome(model).path == "partitions", result.outcome(model).detail
    con = duckdb.connect(str(warehouse))
    try:
        for model, full in FULL.items():
            assert compare_with_full(con, model, full) == {"rows": 0, "groups": 0}, model
    finally:
        con.close()


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps)
def test_random_histories_of_traced_slices_equal_a_full_rebuild(tmp_path_factory, history):
    project, warehouse = make_project(tmp_path_factory.mktemp("traced"), MODULE)
    run_project(project, warehouse)
    for clock, step in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        apply(con, step, clock)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        con = duckdb.connect(str(warehouse))
        try:
            for model, full in FULL.items():
                assert compare_with_full(con, model, full) == {"rows": 0, "groups": 0}, (model, step)
                outcome = result.outcome(model) if model in {o.model for o in result.outcomes} else None
                assert outcome is None or outcome.path != "full", (model, step, outcome)
        finally:
            con.close()


SPARK_MODULE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

source plain {
  table: raw.plain
  key: [order_id]
}

model by_change_day {
  from orders
  let change_day = cast(updated_at as date)
  select order_id, change_day, amount
}

model plain_copy {
  from plain
  select order_id, amount
}
"""
ORDER_COLUMNS = (("order_id", "BIGINT"), ("amount", "BIGINT"), ("updated_at", "TIMESTAMP"))


@pytest.mark.parametrize("engine_name", spark_params())
def test_a_traced_slice_day_is_maintained_on_both_engines_and_key_buckets_on_duckdb_only(
    engine_name, tmp_path
):
    """Spark maintains the traced day like DuckDB; a keyed source without change column is sliced
    by key buckets on DuckDB only (its capability), Spark building the model in full and saying why."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "orders.strata").write_text(SPARK_MODULE)
    first = [(1, 5, START), (2, 7, START + dt.timedelta(days=1))]
    # Row 1 updated and row 3 inserted, both stamped later (the cdc contract).
    later = [
        (1, 9, START + dt.timedelta(days=3)),
        (2, 7, START + dt.timedelta(days=1)),
        (3, 4, START + dt.timedelta(days=3)),
    ]
    folder = tmp_path / engine_name
    folder.mkdir()
    with engine_under_test(engine_name, folder) as engine:
        engine.write_table("raw.orders", ORDER_COLUMNS, first)
        engine.write_table("raw.plain", ORDER_COLUMNS, first)
        engine.run(project)
        engine.write_table("raw.orders", ORDER_COLUMNS, later)
        engine.write_table("raw.plain", ORDER_COLUMNS, later)
        result = engine.run(project, only_stale=True)
        assert result.outcome("by_change_day").path == "partitions"
        assert sorted(engine.live("by_change_day")) == [
            (1, dt.date(2026, 1, 4), 9),
            (2, dt.date(2026, 1, 2), 7),
            (3, dt.date(2026, 1, 4), 4),
        ]
        plain = result.outcome("plain_copy")
        if engine_name == "duckdb":
            assert plain.path == "partitions"
        else:
            assert plain.path == "full"
            assert "does not slice by its key" in plain.detail["full_reason"]
        assert sorted(engine.live("plain_copy")) == [(1, 9), (2, 7), (3, 4)]
