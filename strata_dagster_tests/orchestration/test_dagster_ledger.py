"""Models over a transaction ledger as Dagster assets: the source's observation reads the ledger
and its rows, so Dagster shows stale what `strata plan --only-stale` would rebuild; rows of a
transaction not yet committed give an empty window (nothing published), and a step over a
committed one takes the window's delta."""

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.engine.plan import plan_project
from strata_dagster_tests.engine.sources.test_ledger_sources import commit
from strata_dagster_tests.support.dagster_support import execute_assets, materializations, stale_set
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.log_support import ledger_history_module, make_ledger_project

MODELS = ["up", "ap", "an", "order_history"]


def planned_stale(project, warehouse) -> set[str]:
    return {
        item.model for item in plan_project(project, warehouse, only_stale=True).models if item.would_change
    }


def test_a_committed_transaction_makes_the_ledgers_models_stale_and_a_step_takes_its_delta(tmp_path):
    project, warehouse = make_ledger_project(tmp_path, ledger_history_module())
    commit(warehouse, 1, "APPEND", [(1, "open", 1), (2, "open", 2)])
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    assert execute_assets(defs, instance, ["orders"]).success
    assert execute_assets(defs, instance, MODELS).success
    assert stale_set(defs, instance) == set() == planned_stale(project, warehouse)

    # Rows of a transaction the ledger does not name yet: the source changed (its rows are part of
    # its identity, so an edit made outside any transaction is never missed), both views say so,
    # and the run reads an empty window: nothing is published.
    execute(warehouse, "INSERT INTO raw.orders VALUES (3, 'open', 3, 2)")
    assert execute_assets(defs, instance, ["orders"]).success
    assert stale_set(defs, instance) == set(MODELS) == planned_stale(project, warehouse)
    result = execute_assets(defs, instance, MODELS)
    assert result.success
    assert {event.metadata["strata/path"].value for event in materializations(result, "order_history")} <= {
        "cutoff"
    }
    assert stale_set(defs, instance) == set() == planned_stale(project, warehouse)

    commit(warehouse, 2, "UPDATE", [(1, "paid", 1)])
    assert execute_assets(defs, instance, ["orders"]).success
    assert stale_set(defs, instance) == set(MODELS) == planned_stale(project, warehouse)

    result = execute_assets(defs, instance, ["order_history"])
    assert result.success
    (materialization,) = materializations(result, "order_history")
    assert materialization.metadata["strata/path"].value == "delta"
    assert "order_history" not in stale_set(defs, instance)
    assert execute(
        warehouse, "SELECT id, status, is_current FROM main.v_order_history ORDER BY id, valid_from"
    ) == [(1, "open", False), (1, "paid", True), (2, "open", True), (3, "open", True)]
