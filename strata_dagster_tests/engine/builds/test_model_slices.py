"""Models over other models maintained from their inputs' new segments (engine.builds.model_slices): what
history says, a compaction of the input looked through, an input rebuilt in full, and the models
that cannot be sliced saying why."""

import datetime as dt

import duckdb
import pytest

from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.reads.explain import build_why
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import SNAPSHOT_RELATIONS, execute
from strata_dagster_tests.support.model_slices_support import (
    MODULE,
    SLICED_MODELS,
    START,
    compare,
    make_project,
)
from strata_dagster_tests.support.partition_support import compare_with_full

SLICED = {"tags", "numbered", "ranked", "rw_large", "daily"}


def _update(warehouse, ids, minute):
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, customer_id = (customer_id + 1) % 12, "
        f"updated_at = TIMESTAMP '2027-06-01' + to_minutes({minute}) WHERE list_contains({list(ids)}, order_id)",
    )


def _assert_equal(warehouse):
    con = duckdb.connect(str(warehouse))
    try:
        for model in SLICED_MODELS:
            assert compare(con, model) == {"rows": 0, "groups": 0}, model
    finally:
        con.close()


def test_models_over_models_rebuild_only_the_slices_their_inputs_changed(tmp_path):
    project, warehouse = make_project(tmp_path)
    first = run_project(project, warehouse)
    assert {first.outcome(name).path for name in SLICED_MODELS} == {"full"}
    _update(warehouse, [25, 26], 1)
    result = run_project(project, warehouse, only_stale=True)
    paths = {outcome.model: outcome.path for outcome in result.outcomes}
    assert {name: paths[name] for name in SLICED} == dict.fromkeys(SLICED, "partitions")
    numbered = result.outcome("numbered").detail
    # Orders 25 and 26 moved from customers 1 and 2 to 2 and 3: three window partitions recomputed.
    assert sorted(numbered["partitions"]) == ["1", "2", "3"]
    assert numbered["row_wise"] == "customer_id (the window key)"
    assert sorted(result.outcome("tags").detail["partitions"]) == ["25", "26"]
    assert result.outcome("timeline").path == "delta"
    # What history says of each.
    why = {
        name: build_why(name, paths[name], result.outcome(name).detail, 0)
        for name in ("numbered", "timeline")
    }
    assert why["numbered"].startswith("row-wise delta: the slices by `customer_id (the window key)`")
    assert why["timeline"].startswith(
        "appended delta: what the pipeline gives for the new rows of first_seen, log_short"
    )
    _assert_equal(warehouse)


def test_a_compaction_of_the_input_is_looked_through(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    compacted = False
    for round_ in range(1, 12):
        _update(warehouse, [round_, round_ + 40], round_)
        result = run_project(project, warehouse, only_stale=True)
        compacted = compacted or bool(result.outcome("stg").detail.get("compacted"))
        for name in SLICED:
            path = result.outcome(name).path
            assert path in ("partitions", "cutoff", "reused"), (round_, name, result.outcome(name).detail)
        _assert_equal(warehouse)
    assert compacted


def test_gc_drops_the_delta_segment_a_compaction_keeps(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    for round_ in range(1, 10):
        _update(warehouse, [round_], round_)
        run_project(project, warehouse, only_stale=True)
    (delta,) = execute(
        warehouse,
        "SELECT json_extract_string(detail, '$.compacted_delta') FROM strata.snapshots "
        "WHERE model = 'stg' AND json_extract_string(detail, '$.compacted_delta') IS NOT NULL",
    )[0]
    tables = {row[0] for row in execute(warehouse, f"SELECT name FROM {SNAPSHOT_RELATIONS}")}
    assert delta in tables
    for round_ in range(10, 20):  # compacted again: the first compacted state is no one's any more
        _update(warehouse, [round_], round_)
        run_project(project, warehouse, only_stale=True)
    gc(warehouse, keep=1)
    tables = {row[0] for row in execute(warehouse, f"SELECT name FROM {SNAPSHOT_RELATIONS}")}
    assert delta not in tables
    _assert_equal(warehouse)


def test_an_input_rebuilt_in_full_makes_the_model_full_and_says_why(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    # A row stamped below the watermark: the upsert input cannot trust a delta and rebuilds in full.
    late = START - dt.timedelta(days=3)
    execute(
        warehouse,
        f"INSERT INTO raw.orders VALUES (500, 2, TIMESTAMP '{START}', TIMESTAMP '{late}', 'paid', 'web', 7)",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("stg").path == "full"
    # A partitioned model that recorded its partitions' fingerprints compares them instead, and
    # records the input's segments now, so that its next build follows them again.
    assert result.outcome("daily").path == "partitions"
    (followed,) = execute(
        warehouse,
        "SELECT json_extract(detail, '$.upstream_segments.stg') FROM strata.snapshots WHERE snapshot_id = ?",
        params=[result.outcome("daily").snapshot_id],
    )[0]
    assert followed == f'["{result.outcome("stg").snapshot_id}"]'
    for name in ("tags", "numbered"):
        outcome = result.outcome(name)
        assert outcome.path == "full"
        assert (
            "`stg` was rebuilt, compacted or rolled back since the last build"
            in outcome.detail["full_reason"]
        )
    _assert_equal(warehouse)
    # The next change is sliced again, from the segments of the input's new state.
    _update(warehouse, [9], 1)
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("numbered").path == "partitions"
    _assert_equal(warehouse)


UNSLICEABLE = {
    "whole_window": (
        "from stg\n  derive nth = row_number() over (order by order_id)",
        "a window function reads other rows, and no column of its PARTITION BY",
    ),
    "by_status": ("from stg\n  group status\n  aggregate n = count(*)", "it groups rows"),
    "mixed": ("from log_short\n  union first_short", "a set operation other than one `union all`"),
    "first_short": ("from first_seen\n  select order_id, 'x' as what, amount", None),
    "over_full": ("from cust\n  filter region = 'n'", "`cust` is rebuilt in full on every change"),
    "untracked": ("from stg\n  select order_day, amount", "does not carry `order_id` of `stg` unchanged"),
}


def test_models_that_cannot_be_sliced_are_built_in_full_and_say_why(tmp_path):
    extra = "".join(f"\nmodel {name} {{\n  {body}\n}}\n" for name, (body, _) in UNSLICEABLE.items())
    project, warehouse = make_project(tmp_path, MODULE + extra)
    run_project(project, warehouse)
    _update(warehouse, [3], 1)
    execute(warehouse, "UPDATE raw.orders SET status = 'returned' WHERE order_id = 3")
    execute(warehouse, "UPDATE raw.customers SET region = 'e' WHERE customer_id = 2")
    planned = plan_project(project, warehouse, only_stale=True)
    result = run_project(project, warehouse, only_stale=True)
    for name, (_, reason) in UNSLICEABLE.items():
        if reason is None:
            continue
        outcome = result.outcome(name)
        assert outcome.path == "full", name
        assert outcome.detail["full_reason"].startswith("not maintained row-wise: "), (name, outcome.detail)
        assert reason in outcome.detail["full_reason"], (name, outcome.detail)
        assert outcome.path in planned.model(name).allowed


def test_a_delta_breaking_the_unique_pin_with_a_kept_row_fails_and_publishes_nothing(tmp_path):
    pinned = "\nmodel log_once {\n  from log\n  select order_id, status\n  unique: [order_id]\n}\n"
    project, warehouse = make_project(tmp_path, MODULE + pinned)
    run_project(project, warehouse)
    _update(warehouse, [7], 1)  # a second version of order 7 in the append log: a duplicate order_id
    entries = execute(warehouse, "SELECT count(*) FROM strata.entries")[0][0]
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert caught.value.code == "E030" and "order_id=7" in caught.value.message
    assert execute(warehouse, "SELECT count(*) FROM strata.entries")[0][0] == entries


def test_a_delta_keeping_the_unique_pin_records_the_pin_it_was_checked_by(tmp_path):
    module = MODULE.replace(
        "sum(stg.amount) over (partition by stg.customer_id) as customer_total\n",
        "sum(stg.amount) over (partition by stg.customer_id) as customer_total\n  unique: [order_id]\n",
    )
    assert module != MODULE
    project, warehouse = make_project(tmp_path, module)
    run_project(project, warehouse)
    _update(warehouse, [30, 31], 1)
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("numbered").path == "partitions"
    (checked,) = execute(
        warehouse,
        "SELECT json_extract_string(detail, '$.unique_checked') FROM strata.snapshots WHERE snapshot_id = ?",
        params=[result.outcome("numbered").snapshot_id],
    )[0]
    assert checked == '["order_id"]'
    _assert_equal(warehouse)


def test_a_union_over_an_input_that_replaced_rows_is_built_in_full_and_says_why(tmp_path):
    union = "\nmodel up_union {\n  from stg\n  select order_id, status, amount\n  union all log_short\n}\n"
    project, warehouse = make_project(tmp_path, MODULE + union)
    full = (
        "SELECT order_id, status, amount FROM raw.orders WHERE status <> 'cancelled' "
        "UNION ALL SELECT order_id, status, amount FROM main.v_log"
    )
    run_project(project, warehouse)
    # New orders only: the upsert input gains rows and replaces none, so the union gains their rows.
    execute(
        warehouse,
        "INSERT INTO raw.orders VALUES (901, 2, TIMESTAMP '2026-01-05', TIMESTAMP '2027-05-01', 'paid', 'web', 9)",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up_union").path == "delta"
    con = duckdb.connect(str(warehouse))
    assert compare_with_full(con, "up_union", full) == {"rows": 0, "groups": 0}
    con.close()
    _update(warehouse, [5], 1)
    result = run_project(project, warehouse, only_stale=True)
    outcome = result.outcome("up_union")
    assert outcome.path == "full"
    assert outcome.detail["full_reason"].startswith("`stg` replaced rows it held")
    con = duckdb.connect(str(warehouse))
    assert compare_with_full(con, "up_union", full) == {"rows": 0, "groups": 0}
    con.close()


REFUNDS = """
source refunds {
  table: raw.refunds
  versioning: cdc(updated_at)
}

model refund_log {
  from refunds
  select order_id, amount, updated_at
  incremental
  merge_strategy: append
  cdc_column: updated_at
}

model money {
  from log
  select order_id, amount
  union all refund_amounts
}

model refund_amounts {
  from refund_log
  select order_id, 0 - amount as amount
}
"""


def test_a_union_side_whose_input_did_not_change_reads_nothing(tmp_path):
    project, warehouse = make_project(tmp_path, MODULE + REFUNDS)
    execute(
        warehouse,
        "CREATE TABLE raw.refunds (order_id BIGINT, amount DECIMAL(12, 2), updated_at TIMESTAMP)",
        "INSERT INTO raw.refunds VALUES (1, 5, TIMESTAMP '2026-02-01'), (2, 3, TIMESTAMP '2026-02-02')",
    )
    full = "SELECT order_id, amount FROM main.v_log UNION ALL SELECT order_id, 0 - amount FROM raw.refunds"
    run_project(project, warehouse)
    changes = [
        "INSERT INTO raw.refunds VALUES (3, 4, TIMESTAMP '2026-03-01')",  # only the refunds side
        "UPDATE raw.orders SET amount = amount + 2, updated_at = TIMESTAMP '2027-08-01' WHERE order_id = 8",
    ]
    for change in changes:
        execute(warehouse, change)
        result = run_project(project, warehouse, only_stale=True)
        assert result.outcome("money").path == "delta", result.outcome("money").detail
        con = duckdb.connect(str(warehouse))
        try:
            assert compare_with_full(con, "money", full) == {"rows": 0, "groups": 0}, change
        finally:
            con.close()


def test_a_partition_the_input_recomputed_equal_is_not_followed(tmp_path):
    """An input's recomputed partition that comes back equal is not followed: here it holds one row
    of the input's new segment, which writes it again with the rows it holds (cheaper than writing
    the segment twice), and the model following the input compares figures per slice, where the
    rows it replaced and the rows it holds now cancel out."""
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    # Order 41 (amount 2) is filtered out of `rw` before and after its update: the day it leaves
    # (2026-01-11) is recomputed equal. Order 25 leaves 2026-01-07, and both arrive on 2027-06-01.
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + CASE WHEN order_id = 25 THEN 1 ELSE 0 END, "
        "updated_at = TIMESTAMP '2027-06-01' + to_minutes(order_id) WHERE order_id IN (25, 41)",
    )
    result = run_project(project, warehouse, only_stale=True)
    rw = result.outcome("rw").detail
    assert sorted(rw["partitions"]) == ["2026-01-07", "2026-01-11", "2027-06-01"]
    assert (rw["partitions_unchanged"], rw["unchanged_rewritten"]) == (1, True)
    assert sorted(result.outcome("rw_large").detail["partitions"]) == ["2026-01-07", "2027-06-01"]
    _assert_equal(warehouse)
