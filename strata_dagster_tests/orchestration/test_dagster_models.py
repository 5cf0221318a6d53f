"""The SQL models of a partitioning are one multi-asset (orchestration.assets.models): the models a
run selects build in one engine run, with the same snapshots and data versions as the CLI and one
history entry; Dagster's record and the warehouse agree whatever happens between steps (a blocking
check, another writer, a failure), and no other step runs while a strata step holds the warehouse."""

import shutil
import subprocess
import sys

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import peek_live_contents
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster_tests.support.dagster_support import (
    SOURCES,
    UNPARTITIONED_MODELS,
    execute_assets,
    history_entries,
    launch_in_process,
    make_small_shop,
    observe_sources,
    run_events,
)

MODELS_OP = UNSCOPED.models_op("unpartitioned")


def _materialization(instance: dg.DagsterInstance, name: str) -> dg.AssetMaterialization | None:
    event = instance.get_latest_materialization_event(dg.AssetKey(name))
    return event.asset_materialization if event is not None else None


def _metadata(instance: dg.DagsterInstance, name: str, key: str) -> object:
    materialization = _materialization(instance, name)
    assert materialization is not None, name
    return materialization.metadata[key].value


def _data_version(instance: dg.DagsterInstance, name: str) -> str | None:
    record = instance.get_latest_data_version_record(dg.AssetKey(name))
    return None if record is None else record.event_log_entry.tags.get("dagster/data_version")


def _live(warehouse, names) -> dict[str, str | None]:
    return peek_live_contents(warehouse, list(names), timeout=10)


def test_the_unpartitioned_models_of_a_run_share_one_engine_run_and_build_what_the_cli_builds(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    cli_warehouse = warehouse.with_name("cli.duckdb")
    shutil.copy(warehouse, cli_warehouse)
    run_project(project, cli_warehouse, models=UNPARTITIONED_MODELS)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)

    assert execute_assets(defs, instance, UNPARTITIONED_MODELS).success

    assert len(history_entries(warehouse)) == 1
    assert {_metadata(instance, name, "strata/run_id") for name in UNPARTITIONED_MODELS} == {
        history_entries(warehouse)[0].run_id
    }
    live = _live(warehouse, UNPARTITIONED_MODELS)
    assert live == _live(cli_warehouse, UNPARTITIONED_MODELS)
    assert {name: _data_version(instance, name) for name in UNPARTITIONED_MODELS} == live
    assert all(_metadata(instance, name, "strata/path") == "full" for name in UNPARTITIONED_MODELS)


def test_a_run_that_observes_its_sources_first_builds_its_models_in_one_engine_run(tmp_path):
    # The shape of strata_materialize_all's and the sensor's waves: the observations, then the models.
    project, warehouse = make_small_shop(tmp_path)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()

    result = execute_assets(defs, instance, [*SOURCES, *UNPARTITIONED_MODELS])

    assert result.success
    steps = [event.step_key for event in result.all_events if event.is_step_start]
    assert steps.index("customers") < steps.index(MODELS_OP)
    (entry,) = history_entries(warehouse)  # stg_customers was built alone before: three entries
    assert {_metadata(instance, name, "strata/run_id") for name in UNPARTITIONED_MODELS} == {entry.run_id}
    live = _live(warehouse, UNPARTITIONED_MODELS)
    assert {name: _data_version(instance, name) for name in UNPARTITIONED_MODELS} == live


@pytest.mark.parametrize(
    ("checked", "selection", "below"),
    [
        # A model's check: its step's models are built with it (one engine run, as dagster-dbt's
        # models in one dbt build); the steps after it are skipped.
        ("stg_orders", (*UNPARTITIONED_MODELS, "a_reader"), {"a_reader"}),
        # A source's check, in the run that observes it: the models' step after it is skipped.
        ("customers", (*SOURCES, *UNPARTITIONED_MODELS), set(UNPARTITIONED_MODELS)),
    ],
    ids=["on a model", "on an observed source"],
)
def test_a_step_below_a_failed_blocking_check_is_skipped_and_dagster_agrees_with_the_warehouse(
    tmp_path, checked, selection, below
):
    project, warehouse = make_small_shop(tmp_path)

    @dg.asset_check(asset=checked, blocking=True)
    def refused() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, description="refused by the team's own check")

    @dg.asset(deps=["stg_orders"])
    def a_reader() -> None:
        return None

    defs = dg.Definitions.merge(
        build_definitions(project, warehouse=warehouse, python_assets=[a_reader]),
        dg.Definitions(asset_checks=[refused]),
    )
    instance = dg.DagsterInstance.ephemeral()
    if checked not in selection:
        observe_sources(defs, instance)

    result = execute_assets(defs, instance, selection)

    assert not result.success  # Dagster skips `below`, which reads `checked`
    live = _live(warehouse, UNPARTITIONED_MODELS)
    for name in selection:
        if name in below:
            assert _materialization(instance, name) is None, name
        if name in UNPARTITIONED_MODELS:  # materialized exactly when published, with its content
            assert _data_version(instance, name) == live[name], name
            assert (live[name] is None) == (name in below), name


def test_a_failure_in_the_engine_run_is_reported_by_its_model_and_the_others_are_built(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    marts = project / "marts.strata"
    marts.write_text(marts.read_text().replace("unique: [order_id, tag]", "unique: [tag]"))
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)

    result = execute_assets(defs, instance, UNPARTITIONED_MODELS)

    assert not result.success
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    assert failure.step_key == MODELS_OP
    error = str(failure.step_failure_data.error)
    assert "E030" in error and "order_tags" in error  # its own unique pin, named in the step's failure
    live = _live(warehouse, UNPARTITIONED_MODELS)
    assert live["order_tags"] is None and _materialization(instance, "order_tags") is None
    for name in set(UNPARTITIONED_MODELS) - {"order_tags"}:
        assert _data_version(instance, name) == live[name] is not None, name


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
    # strata's steps before and after the user's: the warehouse was free for it.
    assert steps.index(MODELS_OP) < steps.index("a_user_step") < steps.index(UNSCOPED.checks_op)
    event = instance.get_latest_materialization_event(dg.AssetKey("a_user_step"))
    assert event is not None and event.asset_materialization.metadata["free"].value is True
    assert _another_process_opens(warehouse)  # and released when the run's steps end
