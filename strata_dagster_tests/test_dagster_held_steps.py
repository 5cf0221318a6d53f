"""A run's consecutive strata steps share one open warehouse (orchestration.held_steps), and no
other code runs while the run holds it: the hold ends before any other step starts."""

import subprocess
import sys

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster_tests.dagster_support import launch_in_process, make_small_shop, run_events

OPENS = "import sys, duckdb; duckdb.connect(sys.argv[1], read_only=True).close()"


def _another_process_opens(warehouse) -> bool:
    return subprocess.run([sys.executable, "-c", OPENS, str(warehouse)], capture_output=True).returncode == 0


def test_a_users_step_between_strata_steps_runs_with_the_warehouse_free(tmp_path):
    project, warehouse = make_small_shop(tmp_path)

    @dg.asset(deps=[dg.AssetKey("stg_orders")])
    def a_user_step() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"free": _another_process_opens(warehouse)})

    defs = build_definitions(project, warehouse=warehouse, python_assets=[a_user_step])
    instance = dg.DagsterInstance.ephemeral()
    # Through the definitions' executor, as a run's worker runs it (execute_in_process swaps in Dagster's).
    run = launch_in_process(
        defs, instance, ["orders", "customers", "stg_orders", "a_user_step", "stg_customers"]
    )
    assert run.status == dg.DagsterRunStatus.SUCCESS
    steps = [event.step_key for event in run_events(instance, run.run_id, dg.DagsterEventType.STEP_START)]
    # strata's steps before and after the user's: the hold was released for it.
    assert steps.index("stg_orders") < steps.index("a_user_step") < steps.index("strata_checks")
    event = instance.get_latest_materialization_event(dg.AssetKey("a_user_step"))
    assert event is not None and event.asset_materialization.metadata["free"].value is True
    assert _another_process_opens(warehouse)  # and released when the run's steps end
