"""A Dagster partition backfill is `strata backfill --partitions`: one engine entry point rebuilds
exactly the backfill's partitions (a changed partition outside them stays stale for the next
build), and both leave the same rows and record the same partitions."""

import shutil

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.commands.backfill import backfill
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.dagster_support import (
    change_order,
    day_keys,
    history_entries,
    launch_in_process,
    make_small_shop,
)
from strata_dagster_tests.support.engine_support import execute, row_multiset

WHY = "January's first days were restated"


def paid_order_on(warehouse, day: str) -> int:
    return execute(
        warehouse,
        "SELECT min(order_id) FROM raw.orders WHERE CAST(order_ts AS DATE) = CAST(? AS DATE) "
        "AND status IN ('paid', 'shipped')",
        params=[day],
    )[0][0]


def rebuilt_partitions(warehouse, model: str) -> list[str]:
    with open_session(warehouse, read_only=True) as session:
        entry = session.history.entries()[-1]
        (item,) = [item for item in session.history.entry_models(entry.entry) if item.model == model]
        return item.detail.get("partitions")


def test_a_dagster_partition_backfill_rebuilds_exactly_its_partitions_as_strata_backfill_does(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    first = run_project(project, warehouse).run_id
    days = day_keys()
    change_order(warehouse, paid_order_on(warehouse, days[1]))
    change_order(warehouse, paid_order_on(warehouse, days[5]), amount="777.00")
    twin = tmp_path / "twin.duckdb"
    shutil.copy(warehouse, twin)

    defs = build_definitions(project, warehouse=warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        tags = {"dagster/backfill": "abcdefgh", "strata/reason": WHY}
        run = launch_in_process(defs, instance, ["daily_revenue"], partitions=(days[0], days[2]), tags=tags)
        assert run.status == dg.DagsterRunStatus.SUCCESS
    backfill(project, twin, first, WHY, models=["daily_revenue"], partitions=[f"{days[0]}..{days[2]}"])

    entry = history_entries(warehouse)[-1]
    assert (entry.kind, entry.reason, entry.detail["partitions"]) == ("backfill", WHY, days[:3])
    assert rebuilt_partitions(warehouse, "daily_revenue") == days[:3]
    assert rebuilt_partitions(twin, "daily_revenue") == days[:3]
    assert row_multiset(warehouse, "main.v_daily_revenue") == row_multiset(twin, "main.v_daily_revenue")

    # The changed day outside the backfill was left as it was: the next build finds it.
    again = run_project(project, warehouse, only_stale=True)
    assert again.outcome("daily_revenue").detail["partitions"] == [days[5]]
