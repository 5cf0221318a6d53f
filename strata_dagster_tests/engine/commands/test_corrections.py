"""Corrections replace a relation and run ids name published states.

A correction (`--source s=t`, a backfill's correction) is compared by whole rows, whatever the
source's declared versioning: a corrected row of a `cdc(col)` source whose `col` did not advance
still rebuilds what it changes, and incremental models around it rebuild fully (their watermark
was read from other rows). A run id identifies what the run published: two runs that published
different states get different ids, and `rollback` reaches each of them."""

import json
import subprocess
import sys

import duckdb
import pytest

from strata_dagster.engine.commands import operations
from strata_dagster.engine.commands.backfill import backfill
from strata_dagster.engine.commands.replay import replay
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import SHOP_MODELS, execute, make_shop, row_multiset
from strata_dagster_tests.support.partition_support import compare
from strata_dagster_tests.support.partition_support import make_project as make_partitioned_project

ROWS = 1_500
INCREMENTAL = ("stg_orders", "order_status_log", "first_seen_orders")


def paid_order(warehouse) -> int:
    return execute(warehouse, "SELECT min(order_id) FROM raw.orders WHERE status = 'paid'")[0][0]


def silent_edit(warehouse, table: str, order_id: int, amount: str) -> None:
    """An edit that does not advance `updated_at`: by the cdc contract a delta never sees it."""
    execute(
        warehouse,
        f"UPDATE {table} SET amount = CAST(? AS DECIMAL(12,2)) WHERE order_id = ?",
        params=[amount, order_id],
    )


def correct_orders(warehouse, order_id: int, amount: str) -> None:
    """fixes.orders: raw.orders with one order's amount corrected, `updated_at` left as it was."""
    execute(
        warehouse,
        "CREATE SCHEMA IF NOT EXISTS fixes",
        "CREATE OR REPLACE TABLE fixes.orders AS FROM raw.orders",
    )
    silent_edit(warehouse, "fixes.orders", order_id, amount)


def amount_of(warehouse, order_id: int):
    return execute(warehouse, "SELECT amount FROM main.v_stg_orders WHERE order_id = ?", params=[order_id])[
        0
    ][0]


def models_of(warehouse) -> dict[str, list]:
    return {name: row_multiset(warehouse, f"main.v_{name}") for name in sorted(SHOP_MODELS)}


def full_build_over(tmp_path, order_id: int, amount: str | None) -> dict[str, list]:
    """Every model of a first (full) build over the sample rows, with one order's amount set."""
    project, warehouse = make_shop(tmp_path / "reference", rows=ROWS)
    if amount is not None:
        silent_edit(warehouse, "raw.orders", order_id, amount)
    run_project(project, warehouse)
    return models_of(warehouse)


@pytest.fixture
def shop(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=ROWS)
    first = run_project(project, warehouse)
    return project, warehouse, first, paid_order(warehouse)


@pytest.mark.parametrize("how", ["backfill", "run"])
def test_a_cdc_correction_whose_change_column_does_not_advance_rebuilds(shop, tmp_path, how):
    project, warehouse, first, order = shop
    correct_orders(warehouse, order, "9876.54")
    if how == "backfill":
        result = backfill(project, warehouse, first.run_id, "amount fix", sources=["orders=fixes.orders"])
    else:
        result = run_project(project, warehouse, overrides={"orders": "fixes.orders"}, only_stale=True)
    assert not result.is_noop
    assert str(amount_of(warehouse, order)) == "9876.54"
    for name in INCREMENTAL:
        outcome = result.outcome(name)
        assert outcome.path == "full"
        assert "`orders` is read through an override" in outcome.detail["full_reason"]
    assert result.outcome("daily_revenue").path != "reused"
    assert models_of(warehouse) == full_build_over(tmp_path, order, "9876.54")
    # The history's figures of the corrected source are its whole rows: replay finds them unchanged.
    report = replay(warehouse, result.run_id, execute=True)
    assert report.is_reproduced, report.checks


def test_an_override_with_the_sources_own_rows_changes_nothing(shop):
    project, warehouse, first, _ = shop
    execute(warehouse, "CREATE SCHEMA fixes", "CREATE TABLE fixes.orders AS FROM raw.orders")
    result = backfill(project, warehouse, first.run_id, "same rows", sources=["orders=fixes.orders"])
    assert result.is_noop


def test_a_correction_edited_in_place_is_read_again_and_each_state_can_be_rolled_back_to(shop, tmp_path):
    project, warehouse, first, order = shop
    correct_orders(warehouse, order, "1111.11")
    one = backfill(project, warehouse, first.run_id, "fix", sources=["orders=fixes.orders"])
    silent_edit(warehouse, "fixes.orders", order, "2222.22")  # same updated_at range, other rows
    two = backfill(project, warehouse, first.run_id, "fix again", sources=["orders=fixes.orders"])
    assert not two.is_noop and str(amount_of(warehouse, order)) == "2222.22"
    assert two.outcome("stg_orders").path == "full"
    assert one.run_id != two.run_id
    operations.rollback(warehouse, one.run_id)
    assert str(amount_of(warehouse, order)) == "1111.11"
    assert replay(warehouse, one.run_id).entry.entry == one.entry
    operations.rollback(warehouse, two.run_id)
    assert models_of(warehouse) == full_build_over(tmp_path, order, "2222.22")


def test_after_a_correction_a_plain_run_rebuilds_incremental_models_from_the_source(shop):
    project, warehouse, first, order = shop
    before = models_of(warehouse)
    correct_orders(warehouse, order, "9876.54")
    backfill(project, warehouse, first.run_id, "fix", sources=["orders=fixes.orders"])
    result = run_project(project, warehouse, only_stale=True)
    for name in INCREMENTAL:
        outcome = result.outcome(name)
        assert outcome.path == "full"
        assert "the last build read `orders` through an override" in outcome.detail["full_reason"]
    assert models_of(warehouse) == before


def test_two_runs_that_publish_different_states_get_different_ids(shop):
    project, warehouse, _, order = shop
    one = run_project(project, warehouse, full_refresh=True)
    silent_edit(warehouse, "raw.orders", order, "4444.44")  # the source's figures do not move
    two = run_project(project, warehouse, full_refresh=True)
    assert str(amount_of(warehouse, order)) == "4444.44"
    assert one.run_id != two.run_id
    operations.rollback(warehouse, one.run_id)
    assert str(amount_of(warehouse, order)) != "4444.44"


def test_a_run_of_one_model_after_other_models_changed_gets_another_id(shop):
    """Rollback restores the whole branch as a run left it: the id names that whole state."""
    project, warehouse, _, order = shop
    one = run_project(project, warehouse, models=["stg_customers"])
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = 3333.33, updated_at = (SELECT max(updated_at) FROM raw.orders) "
        "+ INTERVAL 1 SECOND WHERE order_id = ?",
        params=[order],
    )
    run_project(project, warehouse, models=["stg_orders"])
    two = run_project(project, warehouse, models=["stg_customers"])  # the same rows as `one`
    assert one.run_id != two.run_id
    operations.rollback(warehouse, one.run_id)
    assert str(amount_of(warehouse, order)) != "3333.33"


def test_runs_that_publish_equal_contents_get_equal_ids(shop):
    project, warehouse, first, _ = shop
    before = models_of(warehouse)
    again = run_project(project, warehouse)  # every model recomputed: the same rows again
    assert again.run_id == first.run_id
    operations.rollback(warehouse, first.run_id)
    assert models_of(warehouse) == before


def test_backfill_full_refresh_rebuilds_the_selected_models_from_all_their_input(shop, tmp_path):
    project, warehouse, first, order = shop
    silent_edit(warehouse, "raw.orders", order, "5555.55")
    assert backfill(project, warehouse, first.run_id, "no change seen").is_noop
    result = backfill(project, warehouse, first.run_id, "rebuild everything", full_refresh=True)
    assert {outcome.path for outcome in result.outcomes} <= {"full", "cutoff"}
    for name in INCREMENTAL:
        assert result.outcome(name).detail["full_reason"] == "full refresh requested"
    assert str(amount_of(warehouse, order)) == "5555.55"
    entry = execute(warehouse, "SELECT kind, detail FROM strata.entries ORDER BY entry DESC LIMIT 1")[0]
    assert entry[0] == "backfill" and json.loads(entry[1])["full_refresh"] is True
    assert models_of(warehouse) == full_build_over(tmp_path, order, "5555.55")


def test_cli_backfill_applies_a_cdc_correction_and_full_refresh(shop):
    project, warehouse, first, order = shop
    correct_orders(warehouse, order, "9876.54")
    base = [sys.executable, "-m", "strata_dagster.cli.main", "backfill", str(project), first.run_id[:12]]
    common = ["--warehouse", str(warehouse), "--reason", "amount fix"]
    corrected = subprocess.run(
        [*base, *common, "--source", "orders=fixes.orders"], capture_output=True, text=True
    )
    assert corrected.returncode == 0, corrected.stderr
    assert "change nothing" not in corrected.stdout and "recorded" in corrected.stdout
    assert str(amount_of(warehouse, order)) == "9876.54"
    refreshed = subprocess.run(
        [*base, *common, "--models", "stg_orders", "--full-refresh"], capture_output=True, text=True
    )
    assert refreshed.returncode == 0, refreshed.stderr
    assert "stg_orders" in refreshed.stdout and "full" in refreshed.stdout
    detail = execute(warehouse, "SELECT detail FROM strata.entries ORDER BY entry DESC LIMIT 1")[0][0]
    assert json.loads(detail)["full_refresh"] is True


def test_partitioned_models_over_a_corrected_cdc_source_rebuild_fully(tmp_path):
    project, warehouse = make_partitioned_project(tmp_path)
    execute(
        warehouse,
        "INSERT INTO raw.orders SELECT range, TIMESTAMP '2026-01-01' + to_minutes(range * 36), "
        "TIMESTAMP '2026-01-01' + to_minutes(range * 36), 'paid', 'web', (range % 50) + 0.5 FROM range(600)",
    )
    run_project(project, warehouse)
    execute(warehouse, "CREATE SCHEMA fixes", "CREATE TABLE fixes.orders AS FROM raw.orders")
    silent_edit(warehouse, "fixes.orders", 3, "7.00")
    result = run_project(project, warehouse, overrides={"orders": "fixes.orders"}, only_stale=True)
    for name in ("daily", "monthly", "by_ts"):
        assert result.outcome(name).path == "full", result.outcome(name)
    silent_edit(warehouse, "raw.orders", 3, "7.00")  # the full rebuilds below read raw.orders
    con = duckdb.connect(str(warehouse))
    try:
        assert {name: compare(con, name) for name in ("daily", "monthly", "by_ts")} == {
            name: {"rows": 0, "groups": 0, "totals": True} for name in ("daily", "monthly", "by_ts")
        }
    finally:
        con.close()
