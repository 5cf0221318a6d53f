"""The unpartitioned SQL models of a Dagster run share one engine run (orchestration.shared_builds):
the same snapshots and data versions as the CLI, one history entry, and each model still waits
for what Dagster would do before it (a blocking check, another run's publication, a failure)."""

import shutil
import subprocess
import sys

import dagster as dg
import duckdb
import pytest

from strata_dagster import build_definitions
from strata_dagster.engine.run import run_project
from strata_dagster.engine.status import peek_live_contents
from strata_dagster_tests.dagster_support import (
    SOURCES,
    UNPARTITIONED_MODELS,
    execute_assets,
    history_entries,
    make_small_shop,
    observe_sources,
)
from strata_dagster_tests.engine_support import ADVANCE_UPDATED_AT


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
    assert steps.index("customers") < steps.index("stg_customers")
    (entry,) = history_entries(warehouse)  # stg_customers was built alone before: three entries
    assert {_metadata(instance, name, "strata/run_id") for name in UNPARTITIONED_MODELS} == {entry.run_id}
    live = _live(warehouse, UNPARTITIONED_MODELS)
    assert {name: _data_version(instance, name) for name in UNPARTITIONED_MODELS} == live


@pytest.mark.parametrize(
    ("checked", "selection", "below"),
    [
        # A model's check: the run's models after the sources' observation in a run before.
        ("stg_orders", UNPARTITIONED_MODELS, {"orders_enriched", "order_tags"}),
        # A source's check, in the run that observes it: its step succeeded, its check did not.
        ("customers", (*SOURCES, *UNPARTITIONED_MODELS), {"stg_customers", "orders_enriched"}),
    ],
    ids=["on a model", "on an observed source"],
)
def test_an_asset_below_a_failed_blocking_check_is_neither_built_nor_materialized(
    tmp_path, checked, selection, below
):
    project, warehouse = make_small_shop(tmp_path)

    @dg.asset_check(asset=checked, blocking=True)
    def refused() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, description="refused by the team's own check")

    defs = dg.Definitions.merge(
        build_definitions(project, warehouse=warehouse), dg.Definitions(asset_checks=[refused])
    )
    instance = dg.DagsterInstance.ephemeral()
    if checked not in selection:
        observe_sources(defs, instance)

    result = execute_assets(defs, instance, selection)

    assert not result.success  # Dagster skips `below`, which reads `checked`
    live = _live(warehouse, UNPARTITIONED_MODELS)
    for name in UNPARTITIONED_MODELS:
        if name in below:
            assert _materialization(instance, name) is None, name
            assert live[name] is None, f"{name} was published although Dagster skipped it"
        else:
            assert _data_version(instance, name) == live[name] is not None, name


def test_a_failure_in_the_shared_run_is_reported_by_its_model_and_the_others_are_built(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    marts = project / "marts.strata"
    marts.write_text(marts.read_text().replace("unique: [order_id, tag]", "unique: [tag]"))
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)

    result = execute_assets(defs, instance, UNPARTITIONED_MODELS)

    assert not result.success
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    assert failure.step_key == "order_tags"
    error = str(failure.step_failure_data.error)
    assert "E030" in error and "order_tags" in error  # its own unique pin, named by its own step
    live = _live(warehouse, UNPARTITIONED_MODELS)
    assert live["order_tags"] is None and _materialization(instance, "order_tags") is None
    for name in set(UNPARTITIONED_MODELS) - {"order_tags"}:
        assert _data_version(instance, name) == live[name] is not None, name


# Another writer between two steps of the run: it changes a customer and rebuilds orders_enriched
# (a separate process, as another run's worker would be).
_MEDDLE = """
import sys, duckdb
from pathlib import Path
from strata_dagster.engine.run import run_project
project, warehouse = Path(sys.argv[1]), Path(sys.argv[2])
con = duckdb.connect(str(warehouse))
con.execute("UPDATE raw.customers SET region = 'elsewhere' WHERE customer_id = 1")
con.close()
run_project(project, warehouse, models=("orders_enriched",))
"""


def test_a_model_whose_view_changed_after_the_shared_run_is_built_again_at_its_step(tmp_path):
    project, warehouse = make_small_shop(tmp_path)

    @dg.asset(deps=["stg_orders"])
    def a_meddler() -> None:  # sorts before orders_enriched among stg_orders's readers
        subprocess.run([sys.executable, "-c", _MEDDLE, str(project), str(warehouse)], check=True)

    defs = dg.Definitions.merge(
        build_definitions(project, warehouse=warehouse), dg.Definitions(assets=[a_meddler])
    )
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, ["stg_customers"]).success
    con = duckdb.connect(str(warehouse))
    con.execute(f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id = 1")
    con.close()

    result = execute_assets(defs, instance, ["stg_orders", "a_meddler", "orders_enriched"])

    assert result.success
    steps = [event.step_key for event in result.all_events if event.is_step_start]
    assert steps.index("stg_orders") < steps.index("a_meddler") < steps.index("orders_enriched")
    live = _live(warehouse, ["stg_orders", "orders_enriched"])
    assert _data_version(instance, "orders_enriched") == live["orders_enriched"]
    assert _data_version(instance, "stg_orders") == live["stg_orders"]
    # Built by the shared run first, then by the meddler: its step reported the meddler's build.
    assert _metadata(instance, "orders_enriched", "strata/run_id") != _metadata(
        instance, "stg_orders", "strata/run_id"
    )
    assert len(history_entries(warehouse)) == 3  # stg_customers; the shared run; the meddler's
