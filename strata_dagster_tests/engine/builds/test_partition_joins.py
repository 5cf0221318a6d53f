"""Partitioned models over a joined input: a change in the joined input recomputes only the
partitions holding rows whose join keys' joined rows changed, and a recompute that gives the live
rows again keeps the live state (early cutoff)."""

import datetime as dt

import duckdb
import pytest

from strata_dagster.backends.opening import open_session
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import edit_module, snapshot_relations, sql, view_tables
from strata_dagster_tests.support.helpers import compile_text
from strata_dagster_tests.support.partition_support import compare_joined, make_joined_project

START = dt.datetime(2026, 1, 1)
MODELS = ("region_daily", "segment_orders")
EQUAL = {model: {"rows": 0, "groups": 0} for model in MODELS}


@pytest.fixture
def joined(tmp_path):
    project, warehouse = make_joined_project(tmp_path)
    # 40 customers; 60 days x 20 orders of customers 1..45 (41..45 are missing from customers).
    sql(
        warehouse,
        "INSERT INTO raw.customers SELECT range, 'c' || range, 'r' || (range % 4), "
        "CASE WHEN range % 3 = 0 THEN 'business' ELSE 'consumer' END FROM range(1, 41)",
    )
    sql(
        warehouse,
        "INSERT INTO raw.orders SELECT range, range * 7 % 45 + 1, ? + to_minutes(range * 72), "
        "? + to_minutes(range * 72), CASE WHEN range % 9 = 0 THEN 'cancelled' ELSE 'paid' END, "
        "range % 30 + 0.5 FROM range(1200)",
        [START, START],
    )
    run_project(project, warehouse)
    return project, warehouse


def equal_to_full(warehouse):
    con = duckdb.connect(str(warehouse))
    try:
        return {model: compare_joined(con, model) for model in MODELS}
    finally:
        con.close()


def days_of(warehouse, *customers):
    rows = sql(
        warehouse,
        "SELECT DISTINCT CAST(CAST(order_ts AS DATE) AS VARCHAR) FROM raw.orders "
        "WHERE list_contains(?, customer_id) ORDER BY 1",
        [list(customers)],
    )
    return [row[0] for row in rows]


def test_a_rename_that_changes_no_row_keeps_the_live_state(joined):
    project, warehouse = joined
    before = run_project(project, warehouse, only_stale=True)
    views = view_tables(warehouse)
    sql(warehouse, "UPDATE raw.customers SET name = 'renamed' WHERE customer_id = 2")
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        outcome = result.outcome(model)
        assert outcome.path == "cutoff", (model, outcome.detail)
        assert outcome.snapshot_id == before.outcome(model).snapshot_id
        assert not outcome.is_published
        # Only the days holding customer 2's orders were recomputed, to the same rows.
        assert outcome.detail["partitions"] == days_of(warehouse, 2)
    assert view_tables(warehouse) == views
    assert equal_to_full(warehouse) == EQUAL
    # Nothing is stale afterwards: the next run has nothing to do.
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_a_region_change_rebuilds_only_the_days_of_that_customers_orders(joined):
    project, warehouse = joined
    sql(warehouse, "UPDATE raw.customers SET region = 'moved', segment = 'business' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    days = days_of(warehouse, 4)
    assert 0 < len(days) < 60
    for model in MODELS:
        outcome = result.outcome(model)
        assert outcome.path == "partitions", (model, outcome.detail)
        assert outcome.detail["partitions"] == days
        assert outcome.detail["partitions_reached_by_joins"] == len(days)
    assert equal_to_full(warehouse) == EQUAL


def test_inserted_deleted_and_duplicated_customers_rebuild_their_days(joined):
    project, warehouse = joined
    # 42 was missing (its orders were 'unknown' / left out of the inner join), 5 leaves, 7 doubles.
    sql(
        warehouse,
        "INSERT INTO raw.customers VALUES (42, 'new', 'r9', 'business'), (7, 'twin', 'r1', 'consumer')",
    )
    sql(warehouse, "DELETE FROM raw.customers WHERE customer_id = 5")
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        assert result.outcome(model).detail["partitions"] == days_of(warehouse, 5, 7, 42), model
    assert equal_to_full(warehouse) == EQUAL


def test_a_fact_change_and_a_dimension_change_in_one_run(joined):
    project, warehouse = joined
    sql(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1, updated_at = updated_at + INTERVAL 400 DAY WHERE order_id = 1",
    )
    sql(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 11")
    result = run_project(project, warehouse, only_stale=True)
    fact_day = sql(
        warehouse, "SELECT CAST(CAST(order_ts AS DATE) AS VARCHAR) FROM raw.orders WHERE order_id = 1"
    )
    expected = sorted({*days_of(warehouse, 11), fact_day[0][0]})
    assert result.outcome("region_daily").detail["partitions"] == expected
    assert equal_to_full(warehouse) == EQUAL


def test_a_join_not_made_of_key_equalities_rebuilds_every_partition(joined, tmp_path):
    project, warehouse = joined
    edit_module(
        project / "orders.strata",
        "join customers on orders.customer_id = customers.customer_id",
        "join customers on orders.customer_id = customers.customer_id and orders.amount > 3",
    )
    run_project(project, warehouse, only_stale=True)
    sql(warehouse, "UPDATE raw.customers SET region = 'moved', segment = 'business' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    outcome = result.outcome("segment_orders")
    assert outcome.path == "full"
    assert "is not made only of" in outcome.detail["full_reason"]
    assert result.outcome("region_daily").path == "partitions"
    # (the edited model is no longer the one JOINED_FULL recomputes)
    assert equal_to_full(warehouse)["region_daily"] == EQUAL["region_daily"]


def test_a_full_rebuild_with_the_live_rows_keeps_the_live_state(joined):
    """The fallback path cuts off too: a join the engine cannot trace by keys, rows unchanged."""
    project, warehouse = joined
    edit_module(
        project / "orders.strata",
        "join customers on orders.customer_id = customers.customer_id",
        "join customers on orders.customer_id = customers.customer_id and orders.amount > 3",
    )
    before = run_project(project, warehouse, only_stale=True)
    views = view_tables(warehouse)
    sql(warehouse, "UPDATE raw.customers SET name = 'renamed' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    outcome = result.outcome("segment_orders")
    assert outcome.path == "cutoff"
    assert outcome.snapshot_id == before.outcome("segment_orders").snapshot_id
    assert view_tables(warehouse) == views


def test_gc_keeps_the_figures_a_compacted_state_carries(joined):
    """Builds whose joined input did not change carry the figures table of an earlier build; gc
    drops that build's snapshots after a compaction but keeps the figures the live state names."""
    project, warehouse = joined
    sql(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 4")
    run_project(project, warehouse, only_stale=True)
    # Fact-only changes of paid orders, until the segments are compacted.
    compacted = False
    for step, order in enumerate((1, 2, 4, 5, 7, 8, 10, 11, 13), start=1):
        sql(
            warehouse,
            "UPDATE raw.orders SET amount = amount + 1, updated_at = ? WHERE order_id = ?",
            [START + dt.timedelta(days=400, minutes=step), order],
        )
        result = run_project(project, warehouse, only_stale=True)
        assert result.outcome("region_daily").path == "partitions"
        compacted = compacted or bool(result.outcome("region_daily").detail.get("compacted"))
    assert compacted
    assert gc(warehouse, keep=1).dropped
    # The figures tables left are exactly those the remaining snapshots name: none leaks, none missing.
    with open_session(warehouse) as session:
        named = {
            figures["table"]
            for record in session.history.snapshots()
            if not record.is_dropped
            for figures in record.detail.get("join_figures", {}).values()
        }
    present = {name for name in snapshot_relations(warehouse) if "__by_" in name}
    assert present == named
    sql(warehouse, "UPDATE raw.customers SET region = 'back' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("region_daily").path == "partitions", result.outcome("region_daily").detail
    assert result.outcome("region_daily").detail["partitions"] == days_of(warehouse, 4)
    assert equal_to_full(warehouse) == EQUAL


def _quiet_days(warehouse, project, count):
    """`count` January days where customer 4's only order is cancelled: region_daily's rows there
    do not depend on 4, so a change of 4's region recomputes them and they come back equal."""
    quiet = [
        day
        for day in (f"2026-01-{number:02d}" for number in range(2, 29))
        if day not in days_of(warehouse, 4)
    ][:count]
    for number, day in enumerate(quiet):
        sql(
            warehouse,
            "INSERT INTO raw.orders VALUES (?, 4, CAST(? AS TIMESTAMP) + INTERVAL 5 HOUR, ?, 'cancelled', 9.5)",
            [5000 + number, day, START + dt.timedelta(days=400)],
        )
    run_project(project, warehouse, only_stale=True)
    return quiet


def _rows_by_day_in(warehouse, table_name, days):
    return sql(
        warehouse,
        f"SELECT count(*) FILTER (list_contains(CAST(? AS DATE[]), order_day)), count(DISTINCT order_day) "
        f"FROM strata_snapshots.{table_name}",
        [days],
    )[0]


def test_recomputed_days_whose_rows_did_not_change_keep_their_live_segment(joined):
    project, warehouse = joined
    quiet = _quiet_days(warehouse, project, 12)
    sql(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    daily = result.outcome("region_daily")
    assert daily.path == "partitions"
    assert set(quiet) <= set(daily.detail["partitions"])
    # The quiet days hold more than a quarter of the recomputed rows (partitions.MIN_EQUAL_SHARE):
    # the new segment holds only the days that changed; the quiet days are read from their live segment.
    assert daily.detail["partitions_unchanged"] == len(quiet)
    assert "unchanged_rewritten" not in daily.detail
    changed = len(daily.detail["partitions"]) - len(quiet)
    assert _rows_by_day_in(warehouse, daily.table_name, quiet) == (0, changed)
    assert sql(
        warehouse, "SELECT count(*) FROM main.v_region_daily WHERE order_day = CAST(? AS DATE)", [quiet[0]]
    )[0][0]
    # segment_orders shows no region: every recomputed day equals its live rows.
    assert result.outcome("segment_orders").path == "cutoff"
    assert equal_to_full(warehouse) == EQUAL


def test_a_few_recomputed_days_that_did_not_change_stay_in_the_new_segment(joined):
    """One quiet day among the 27 days of customer 4's orders: dropping it would mean writing the
    segment again, so it is written with the rows it holds, and still named unchanged."""
    project, warehouse = joined
    (quiet,) = _quiet_days(warehouse, project, 1)
    sql(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    daily = result.outcome("region_daily")
    assert daily.path == "partitions"
    assert (daily.detail["partitions_unchanged"], daily.detail["unchanged_rewritten"]) == (1, True)
    in_segment, days = _rows_by_day_in(warehouse, daily.table_name, [quiet])
    assert in_segment > 0 and days == len(daily.detail["partitions"])
    assert equal_to_full(warehouse) == EQUAL


@pytest.mark.parametrize(
    ("join", "keys", "problem"),
    [
        ("join left customers using (customer_id)", (("customer_id", "customer_id"),), None),
        (
            "join customers on (orders.customer_id = customers.customer_id)",
            (("customer_id", "customer_id"),),
            None,
        ),
        (
            "join customers on customers.customer_id = orders.customer_id",
            (("customer_id", "customer_id"),),
            None,
        ),
        ("join right customers using (customer_id)", (), "a right join keeps rows"),
        ("join full customers using (customer_id)", (), "a full join keeps rows"),
        (
            "join customers on orders.customer_id = customers.customer_id and orders.amount > 3",
            (),
            "is not made only",
        ),
        ("join customers on orders.customer_id > customers.customer_id", (), "is not made only"),
        ("join customers on orders.order_id = customers.customer_id + 1", (), "is not made only"),
    ],
)
def test_which_joins_reach_partitions_by_key(join, keys, problem):
    compiled = compile_text(f"model m {{\n  from orders\n  {join}\n  select orders.order_id\n}}").models["m"]
    (found,) = compiled.joins
    assert found.relation == "customers"
    assert found.keys == keys
    assert (found.problem is None) if problem is None else (problem in found.problem)


def test_a_join_key_that_is_not_carried_from_the_from_relation_is_a_problem():
    text = """model m {
  from orders
  derive customer_id = customer_id + 1
  join customers using (customer_id)
}"""
    (found,) = compile_text(text).models["m"].joins
    assert "not a column of `orders` carried unchanged" in found.problem


def test_a_joined_input_whose_columns_changed_rebuilds_every_partition(joined):
    project, warehouse = joined
    sql(warehouse, "ALTER TABLE raw.customers ADD COLUMN tier INTEGER")
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        outcome = result.outcome(model)
        assert (
            outcome.detail["full_reason"] == "`customers` changed its columns, and every partition reads it"
        )
        assert outcome.path == "cutoff"  # a full build, whose rows equal the live ones
    # The cutoff kept the live state and its figures of the old columns: the next change rebuilds
    # fully again (more work, never less), and the state it publishes records the new columns.
    sql(warehouse, "UPDATE raw.customers SET region = 'moved', segment = 'business' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        assert result.outcome(model).path == "full", result.outcome(model).detail
    sql(warehouse, "UPDATE raw.customers SET region = 'back', segment = 'consumer' WHERE customer_id = 4")
    result = run_project(project, warehouse, only_stale=True)
    for model in MODELS:
        assert result.outcome(model).detail["partitions"] == days_of(warehouse, 4)
    assert equal_to_full(warehouse) == EQUAL
