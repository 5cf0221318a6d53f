"""End to end, as a newcomer uses it: `dagster dev` (webserver and daemon) on 127.0.0.1 with a
temporary DAGSTER_HOME holding the repository's dagster.yaml, the example's definitions.py, and
GraphQL for what the UI shows: a changed source row makes exactly its downstream stale; the
`strata_materialize_stale` sensor materializes them; everything is fresh afterwards. Two runs launched at
once both succeed (the `duckdb` pool)."""

import runpy

import dagster as dg
import pytest

from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    DONE,
    change_order,
    dagster_dev,
    example_workspace,
    execute_assets,
    finished,
    materialize_everything,
    order_day,
    wait_for,
)


@pytest.fixture
def example(tmp_path):
    """The example's definitions.py over a small warehouse, materialized, with one order changed
    behind Dagster's back (not observed yet), and a DAGSTER_HOME with the repository's dagster.yaml."""
    project, warehouse, home = example_workspace(tmp_path)
    defs = runpy.run_path(str(project / "definitions.py"))["defs"]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        materialize_everything(defs, instance)
        assert execute_assets(defs, instance, ["region_summary"]).success
    order = paid_order(warehouse)
    change_order(warehouse, order)
    return tmp_path, home, order_day(warehouse, order)


@pytest.fixture
def running(example):
    root, home, _ = example
    with dagster_dev(root, home) as (graphql, log):
        yield graphql, log


def test_a_changed_source_row_shows_exactly_its_stale_downstream_and_the_sensor_freshens_it(example, running):
    _, _, day = example
    graphql, log = running
    assert graphql.stale() == set()  # changed, but not observed yet
    # Observe both sources at once, as two runs: both open the warehouse, and both succeed.
    runs = [graphql.launch(["orders"]), graphql.launch(["customers"])]
    statuses = wait_for(lambda: finished(graphql, runs), 120, "the two observation runs", log)
    assert set(statuses.values()) == {"SUCCESS"}, statuses
    # Exactly the models that read `orders` are stale; no partition is.
    assert graphql.stale() == {"stg_orders", "order_status_log", "first_seen_orders"}
    # Materialize them as the UI's "Materialize unsynced" does: their consumers turn stale, and of
    # daily_revenue, which reads the unpartitioned stg_orders per day, only the changed order's day.
    run = graphql.launch(["stg_orders", "order_status_log", "first_seen_orders"], job="strata_unpartitioned")
    assert set(wait_for(lambda: finished(graphql, [run]), 120, "wave 1", log).values()) == {"SUCCESS"}
    assert graphql.stale() == {"orders_enriched", "order_tags", "order_timeline", f"daily_revenue[{day}]"}
    # The stale partition is what "Materialize unsynced" leaves behind: the sensor takes it, and
    # the one month whose day changed, then region_summary.
    graphql.start_sensor("strata_materialize_stale")

    def settled():
        runs = graphql.runs()
        if any(run["status"] not in DONE for run in runs):
            return None
        return runs if graphql.stale() == set() else None

    runs = wait_for(settled, 240, "the sensor to materialize everything stale", log)
    assert {run["status"] for run in runs} == {"SUCCESS"}
    monthly = [run for run in runs if run["jobName"] == "strata_monthly_revenue_partitions"]
    assert [(run["start"], run["end"]) for run in monthly] == [(day[:8] + "01", day[:8] + "01")]
