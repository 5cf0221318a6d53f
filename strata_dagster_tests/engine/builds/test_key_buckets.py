"""Row-wise models over sources with a key and no change column are rebuilt by the key buckets
whose rows changed (engine/key_buckets.py): equal to a full rebuild under random histories of
inserts, updates and deletes, with `strata plan` naming the buckets, and a source with neither key
nor change column still built in full with the reason."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.builds.state_figures import NULL_KEY
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import execute, snapshot_relations
from strata_dagster_tests.support.incremental_support import compaction_thresholds
from strata_dagster_tests.support.key_buckets_support import (
    BUCKETED,
    START,
    assert_all_equal_full,
    make_project,
)

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

DAYS = 50
days = st.integers(min_value=0, max_value=DAYS - 1)
ids = st.integers(min_value=-130, max_value=199)  # negative ones only once an `odd_key` step wrote them
tables = st.sampled_from(["orders", "placed"])

insert = st.tuples(
    st.just("insert"), tables, st.lists(st.tuples(days, st.integers(1, 60)), min_size=1, max_size=4)
)
update = st.tuples(st.just("amount"), tables, st.lists(ids, min_size=1, max_size=5), st.integers(-20, 20))
status = st.tuples(
    st.just("status"),
    tables,
    st.lists(ids, min_size=1, max_size=4),
    st.sampled_from(["paid", "cancelled", None]),  # `placed`'s key: NULL hashes to a bucket like any value
)
move = st.tuples(st.just("move"), tables, ids, days)
delete = st.tuples(st.just("delete"), tables, st.lists(ids, min_size=1, max_size=4))
duplicate = st.tuples(st.just("duplicate"), tables, ids)  # a key twice: buckets need no uniqueness
# A key no build has seen the like of: NULL (the NULL block), or negative, where `key // 64`
# truncates towards zero (block 0 holds -63..63, block -1 -127..-64).
odd_key = st.tuples(st.just("odd_key"), tables, st.sampled_from([None, -1, -63, -64, -65, -128]), days)
region = st.tuples(
    st.just("region"), st.lists(st.integers(0, 24), min_size=1, max_size=3), st.sampled_from(["n", "e"])
)
steps = st.lists(
    st.one_of(insert, update, status, move, delete, duplicate, odd_key, region), min_size=1, max_size=5
)


def apply(con, step):
    """A change in place, no change column advanced (the sources have none)."""
    kind, table = step[0], step[1]
    if kind == "insert":
        for day, amount in step[2]:
            con.execute(
                f"INSERT INTO raw.{table} SELECT coalesce(max(order_id), 0) + 1, ? % 25, ?, ?, 'paid', ? "
                f"FROM raw.{table}",
                [amount, START + dt.timedelta(days=day), START, amount],
            )
    elif kind == "amount":
        con.execute(
            f"UPDATE raw.{table} SET amount = amount + ? WHERE list_contains(?, order_id)", [step[3], step[2]]
        )
    elif kind == "status":
        con.execute(f"UPDATE raw.{table} SET status = ? WHERE list_contains(?, order_id)", [step[3], step[2]])
    elif kind == "move":
        con.execute(
            f"UPDATE raw.{table} SET order_ts = ? + to_hours(3) WHERE order_id = ?",
            [START + dt.timedelta(days=step[3]), step[2]],
        )
    elif kind == "delete":
        con.execute(f"DELETE FROM raw.{table} WHERE list_contains(?, order_id)", [step[2]])
    elif kind == "duplicate":
        con.execute(
            f"INSERT INTO raw.{table} SELECT * REPLACE (amount + 1 AS amount) FROM raw.{table} WHERE order_id = ?",
            [step[2]],
        )
    elif kind == "odd_key":
        con.execute(
            f"INSERT INTO raw.{table} VALUES (?, 3, ?, ?, 'paid', 7)",
            [step[2], START + dt.timedelta(days=step[3]), START],
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
# A NULL key: its bucket is the NULL one, the same before and after (found by these histories).
@example(history=[("odd_key", "orders", None, 0)], is_eager=False)
# A changed customer reaches the NULL key's block of the orders joined to it.
@example(history=[("odd_key", "orders", None, 0), ("region", [3], "e")], is_eager=False)
@example(
    history=[("odd_key", "placed", None, 3), ("odd_key", "orders", -64, 1), ("delete", "orders", [-64])],
    is_eager=True,
)
def test_random_histories_of_key_bucketed_models_equal_a_full_rebuild(tmp_path_factory, history, is_eager):
    """`is_eager`: segments compacted at every chance. The plan names exactly the buckets rebuilt."""
    with compaction_thresholds(is_eager):
        project, warehouse = make_project(tmp_path_factory.mktemp("key_buckets"))
        run_project(project, warehouse)
        for step in history:
            con = duckdb.connect(str(warehouse))
            apply(con, step)
            con.close()
            planned = plan_project(project, warehouse, only_stale=True)
            result = run_project(project, warehouse, only_stale=True)
            assert_all_equal_full(warehouse, step)
            for outcome in result.outcomes:
                if outcome.model in (*BUCKETED, "daily"):
                    # Never a full rebuild: every change reaches only the buckets it touched.
                    assert outcome.path != "full", (step, outcome)
                model = planned.model(outcome.model)
                assert outcome.path in model.allowed, (step, model, outcome.path)
                if model.is_exact and outcome.path == "partitions":
                    assert sorted(outcome.detail["partitions"]) == list(model.partition_keys), (step, model)


def test_an_update_rebuilds_only_its_key_bucket_and_plan_says_so(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    con = duckdb.connect(str(warehouse))
    con.execute("UPDATE raw.orders SET amount = amount + 3 WHERE order_id = 5")
    con.execute("UPDATE raw.loose SET amount = amount + 3 WHERE order_id = 5")
    con.execute("UPDATE raw.placed SET amount = amount + 3 WHERE order_id = 5")
    con.close()
    planned = plan_project(project, warehouse, only_stale=True)
    assert planned.model("stg").path == "partitions"
    assert len(planned.model("stg").partition_keys) == 1
    loose = planned.model("loose_copy")
    assert loose.path == "full"
    assert "has no key" in loose.reason
    result = run_project(project, warehouse, only_stale=True)
    stg = result.outcome("stg")
    assert stg.path == "partitions"
    assert stg.detail["row_wise"] == "block(order_id)"
    placed = result.outcome("placed_region")
    assert (placed.path, placed.detail["row_wise"]) == ("partitions", "bucket(status)")
    assert list(stg.detail["partitions"]) == list(planned.model("stg").partition_keys)
    assert result.outcome("loose_copy").path == "full"
    assert "has no key" in result.outcome("loose_copy").detail["full_reason"]
    assert result.outcome("daily").path == "partitions"
    assert result.outcome("daily").detail["partitions"] == ["2026-01-02"]


def test_the_block_of_a_null_key_is_recomputed_when_its_rows_change_and_only_then(tmp_path):
    """Rows with a NULL key are the NULL block: an unrelated change leaves it alone, a change of
    one of its rows rebuilds it alone, and a changed customer joined to it reaches it."""
    project, warehouse = make_project(tmp_path)
    execute(warehouse, "INSERT INTO raw.orders VALUES (NULL, 3, ?, ?, 'paid', 7)", params=[START, START])
    run_project(project, warehouse)

    def rebuilt(statement: str) -> dict[str, list[str]]:
        execute(warehouse, statement)
        result = run_project(project, warehouse, only_stale=True)
        assert_all_equal_full(warehouse, statement)
        return {
            outcome.model: outcome.detail["partitions"]
            for outcome in result.outcomes
            if outcome.model in ("stg", "orders_region") and outcome.path == "partitions"
        }

    assert rebuilt("UPDATE raw.orders SET amount = amount + 1 WHERE order_id = 100") == {
        "stg": ["1"],
        "orders_region": ["1"],
    }
    null = rebuilt("UPDATE raw.orders SET amount = amount + 1 WHERE order_id IS NULL")
    assert null == {"stg": [NULL_KEY], "orders_region": [NULL_KEY]}
    reached = rebuilt("UPDATE raw.customers SET region = 'e' WHERE customer_id = 3")
    assert NULL_KEY in reached["orders_region"] and "stg" not in reached


def test_gc_drops_the_bucket_figures_of_the_states_it_drops(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    for amount in (1, 2, 3):
        con = duckdb.connect(str(warehouse))
        con.execute("UPDATE raw.orders SET amount = amount + ? WHERE order_id = 5", [amount])
        con.close()
        run_project(project, warehouse, only_stale=True)
    assert len([name for name in snapshot_relations(warehouse) if name.endswith("_stg__buckets")]) == 4
    run_project(project, warehouse, full_refresh=True)  # a new base: the delta states are superseded
    gc(warehouse, keep=1)
    assert len([name for name in snapshot_relations(warehouse) if name.endswith("_stg__buckets")]) == 1
