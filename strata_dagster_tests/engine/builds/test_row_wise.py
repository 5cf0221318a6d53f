"""Plain row-wise models are maintained by the slices of their source whose rows changed; a plain
model that does not qualify is built in full with the reason in history."""

import duckdb
import pytest

from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.reads.explain import history
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import execute, make_module_project
from strata_dagster_tests.support.partition_support import compare_with_full
from strata_dagster_tests.support.row_wise_support import MODULE, compare, make_project

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)


def test_an_update_recomputes_only_the_old_and_new_days_and_a_filter_move_leaves(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    # Order 1 is cancelled (it leaves `stg`), order 2 gets a new amount; both move to a new day.
    execute(
        warehouse,
        "UPDATE raw.orders SET status = 'cancelled', updated_at = TIMESTAMP '2027-03-01 10:00' WHERE order_id = 1",
        "UPDATE raw.orders SET amount = 99, updated_at = TIMESTAMP '2027-03-01 10:01' WHERE order_id = 2",
    )
    result = run_project(project, warehouse, only_stale=True)
    stg = result.outcome("stg")
    assert stg.path == "partitions"
    assert stg.detail["row_wise"] == "day(updated_at)"
    # Orders 1 and 2 were stamped on 2026-01-01; their new versions on 2027-03-01.
    assert stg.detail["partitions"] == ["2026-01-01", "2027-03-01"]
    assert stg.detail["partitions_total"] > 40
    assert execute(warehouse, "SELECT order_id, amount FROM main.v_stg WHERE order_id IN (1, 2)") == [(2, 99)]
    con = duckdb.connect(str(warehouse))
    try:
        for model in ("stg", "stg_region", "daily"):
            assert compare(con, model) == {"rows": 0, "groups": 0}, model
    finally:
        con.close()
    builds = {build.model: build for build in history(warehouse)[-1].builds}
    assert builds["stg"].text().startswith("row-wise delta: the slices by `day(updated_at)`")
    assert builds["stg"].partitions_rebuilt == 2


def test_a_partitioned_source_slices_by_its_own_partitions(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    execute(warehouse, "DELETE FROM raw.placed WHERE order_id = 5")
    result = run_project(project, warehouse, only_stale=True)
    items = result.outcome("placed_items")
    assert (items.path, items.detail["row_wise"], items.detail["partitions"]) == (
        "partitions",
        "day(order_ts)",
        ["2026-01-02"],
    )
    assert execute(warehouse, "SELECT count(*) FROM main.v_placed_items WHERE order_id = 5") == [(0,)]
    # Nothing changed in `orders`: its row-wise models are reused.
    assert result.outcome("stg").path == "reused"


NOT_ROW_WISE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

source versioned {
  table: raw.versioned
  versioning: cdc(version)
}

source plain {
  table: raw.plain
}

model by_status {
  from orders
  group status
  aggregate n = count(*)
}

model without_stamp {
  from orders
  select order_id, amount
}

model by_version {
  from versioned
  filter amount > 1
}

model of_plain {
  from plain
  filter amount > 1
}
"""


def test_a_model_that_is_not_row_wise_is_built_in_full_and_says_why(tmp_path):
    project, warehouse = make_module_project(
        tmp_path,
        "orders.strata",
        NOT_ROW_WISE,
        "CREATE TABLE raw.orders (order_id BIGINT, status VARCHAR, amount INT, updated_at TIMESTAMP)",
        "CREATE TABLE raw.versioned (order_id BIGINT, amount INT, version BIGINT)",
        "CREATE TABLE raw.plain (order_id BIGINT, amount INT)",
        "INSERT INTO raw.orders VALUES (1, 'paid', 5, TIMESTAMP '2026-01-01'), (2, 'paid', 7, TIMESTAMP '2026-01-02')",
        "INSERT INTO raw.versioned VALUES (1, 5, 1), (2, 7, 2)",
        "INSERT INTO raw.plain VALUES (1, 5), (2, 7)",
    )
    run_project(project, warehouse)
    execute(
        warehouse,
        "UPDATE raw.orders SET status = 'shipped', amount = 9, updated_at = TIMESTAMP '2026-01-03' WHERE order_id = 1",
        "UPDATE raw.versioned SET amount = 9, version = 3 WHERE order_id = 1",
        "UPDATE raw.plain SET amount = 9 WHERE order_id = 1",
    )
    result = run_project(project, warehouse, only_stale=True)
    reasons = {
        outcome.model: (outcome.path, outcome.detail.get("full_reason")) for outcome in result.outcomes
    }
    assert reasons == {
        "by_status": (
            "full",
            "not maintained row-wise: it groups rows (an output row reads many source rows)",
        ),
        "without_stamp": (
            "full",
            "not maintained row-wise: the model does not carry `updated_at` of `orders` unchanged, nor its day "
            "or month through a `let`, so its rows cannot be sliced",
        ),
        "by_version": (
            "full",
            "not maintained row-wise: cdc column `version` of `versioned` is not a DATE or TIMESTAMP, so it has no days",
        ),
        "of_plain": (
            "full",
            "not maintained row-wise: `plain` is neither partitioned nor `versioning: cdc(col)` and has no key "
            "(declare `key: [col]` on the source, or read it in a model with `merge_keys`): no change signal "
            "narrower than the whole source",
        ),
    }
    texts = {build.model: build.text() for build in history(warehouse)[-1].builds}
    assert texts["by_status"].startswith("full: not maintained row-wise: it groups rows")


def test_a_declared_partitioning_or_strategy_is_left_as_declared(tmp_path):
    module = MODULE.replace(
        "  select order_id, customer_id, order_day, updated_at, status, amount, is_large, net\n}",
        "  select order_id, customer_id, order_day, updated_at, status, amount, is_large, net\n"
        "  partitioned_by: day(order_day)\n}",
    )
    project, warehouse = make_project(tmp_path, module)
    run_project(project, warehouse)
    execute(
        warehouse, "UPDATE raw.orders SET amount = 3, updated_at = TIMESTAMP '2027-01-01' WHERE order_id = 9"
    )
    stg = run_project(project, warehouse, only_stale=True).outcome("stg")
    assert stg.path == "partitions" and "row_wise" not in stg.detail
    assert stg.detail["partitions"] == ["2026-01-03"]  # order 9's day of `order_day`, not of updated_at


def test_segments_of_a_row_wise_model_are_compacted(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse, models=["stg"])
    compacted = []
    for step in range(9):
        execute(
            warehouse,
            f"UPDATE raw.orders SET amount = amount + 1, updated_at = TIMESTAMP '2027-01-01' + INTERVAL {step} DAY "
            f"WHERE order_id = {[1, 2, 3, 4, 5, 6, 8, 9, 10][step]}",
        )
        stg = run_project(project, warehouse, models=["stg"], only_stale=True).outcome("stg")
        assert stg.path == "partitions"
        compacted.append(bool(stg.detail.get("compacted")))
    assert compacted == [False] * 7 + [True, False]  # a ninth segment is written as one new base
    con = duckdb.connect(str(warehouse))
    try:
        assert compare(con, "stg") == {"rows": 0, "groups": 0}
    finally:
        con.close()


SPREAD = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model stg {
  from orders
  filter status <> 'void'
  select order_id, updated_at, status, amount
}
"""
SPREAD_ORDERS = (
    "CREATE TABLE raw.orders AS SELECT i AS order_id, TIMESTAMP '2026-01-01' + to_days(CAST(i % 40 AS INTEGER)) "
    "AS updated_at, CASE WHEN i % 11 = 0 THEN 'void' ELSE 'open' END AS status, i % 100 AS amount FROM range(4000) AS t(i)"
)
SPREAD_FULL = "SELECT order_id, updated_at, status, amount FROM raw.orders WHERE status <> 'void'"


def test_slices_holding_most_rows_are_built_in_full_and_the_plan_says_so(tmp_path):
    """Updates that move a few rows out of most days of the change column change slices holding
    most of the model's rows: a segment would replace them and the compaction after it rewrite
    them all again, so the model is built in full (as the plan says), and the next change goes
    by slices again."""
    project, warehouse = make_module_project(tmp_path, "m.strata", SPREAD, SPREAD_ORDERS)
    run_project(project, warehouse)
    # 31 orders stamped on 30 of the 40 days move to a new day: 30 days hold 3,000 of 4,000 rows.
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1, updated_at = TIMESTAMP '2027-01-01' "
        "WHERE order_id % 40 < 30 AND order_id % 97 = 0",
    )
    reason = "the 31 changed slices hold"
    planned = plan_project(project, warehouse, only_stale=True).model("stg")
    assert (planned.path, planned.reason.startswith(f"full: {reason}")) == ("full", True), planned.reason
    stg = run_project(project, warehouse, only_stale=True).outcome("stg")
    assert (stg.path, stg.detail["row_wise"]) == ("full", "day(updated_at)")
    assert stg.detail["full_reason"].startswith(reason), stg.detail["full_reason"]
    # Below the share (one day of 41), or too few rows to start a compaction: by slices.
    execute(
        warehouse, "UPDATE raw.orders SET amount = 7, updated_at = TIMESTAMP '2027-02-01' WHERE order_id = 3"
    )
    stg = run_project(project, warehouse, only_stale=True).outcome("stg")
    assert (stg.path, stg.detail["partitions"]) == ("partitions", ["2026-01-04", "2027-02-01"])
    con = duckdb.connect(str(warehouse))
    try:
        assert compare_with_full(con, "stg", SPREAD_FULL) == {"rows": 0, "groups": 0}
    finally:
        con.close()
