"""What Dagster shows of a strata project says what is so, in the small things too: a partitioned
model's row count is its table's (each partition's own is `dagster/partition_row_count`); a step
that built nothing names the run that built what it shows, not "none"; a ranged run leaves no
check "skipped" that it evaluated; a slice-built model's plan names slices of its key, not
partitions; a Python model's staleness is not explained as an unknown model; the descriptions give
the backfill daemon's interval as Dagster has it; a warehouse's snapshot folder is ignored by git.
(`strata_backfill_range` with `first` after `last` is refused before any step: test_dagster_one_run.)"""

import json
import runpy
import subprocess

import dagster as dg
import pytest
from click.testing import CliRunner
from dagster._daemon.controller import DEFAULT_DAEMON_INTERVAL_SECONDS

from strata_dagster.cli.main import main
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster.orchestration.sensors.plan_wording import engine_why
from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    UNPARTITIONED_MODELS,
    change_order,
    day_keys,
    example_workspace,
    execute_assets,
    materialized_shop,
    run_events,
)
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.paths import REPO

REPO = REPO
DAILY = dg.AssetKey("daily_revenue")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    return materialized_shop(tmp_path_factory.mktemp("truths"))


def _materializations(instance, run_id) -> list[dg.AssetMaterialization]:
    return [
        event.dagster_event.event_specific_data.materialization
        for event in run_events(instance, run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
    ]


def test_a_partitioned_models_row_count_is_its_tables_and_each_partition_has_its_own(shop):
    project, warehouse, defs, instance = shop
    latest = instance.get_latest_materialization_event(DAILY).asset_materialization
    (whole,) = execute(warehouse, "SELECT count(*) FROM main.v_daily_revenue")[0:1]
    assert latest.metadata[c.ROW_COUNT_KEY].value == whole[0] > 5
    last = latest.partition
    (own,) = execute(
        warehouse, "SELECT count(*) FROM main.v_daily_revenue WHERE order_day = ?", params=[last]
    )
    assert latest.metadata[c.PARTITION_ROW_COUNT_KEY].value == own[0] == latest.metadata[c.ROWS_KEY].value


def test_a_step_that_built_nothing_names_the_run_that_built_what_it_shows(shop):
    project, warehouse, defs, instance = shop
    before = instance.get_latest_materialization_event(dg.AssetKey("stg_orders")).asset_materialization
    built_by = before.metadata[c.RUN_ID_KEY].value
    result = execute_assets(defs, instance, UNPARTITIONED_MODELS)  # everything reused
    (again,) = [m for m in _materializations(instance, result.run_id) if m.asset_key.path == ["stg_orders"]]
    assert c.RUN_ID_KEY not in again.metadata
    assert again.metadata[c.BUILT_BY_RUN_KEY].value == built_by
    assert again.metadata[c.PATH_KEY].value == "reused"


def test_a_ranged_run_leaves_no_check_it_evaluated_skipped(shop):
    """Dagster plans every check of a ranged run once per partition: each gets an evaluation (the
    stale-partitions check its partition's own answer); the asset's result is the latest shown."""
    project, warehouse, defs, instance = shop
    keys = day_keys()
    result = execute_assets(defs, instance, ["daily_revenue"], partitions=(keys[0], keys[9]))
    graph = defs.resolve_asset_graph()
    for check_key in graph.asset_check_keys:
        if check_key.asset_key != DAILY:
            continue
        records = [
            record
            for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=200)
            if record.run_id == result.run_id
        ]
        left = sorted(record.partition for record in records if record.status.value == "PLANNED")
        if check_key.name in ("strata_incremental_equals_full", "column_schema_change"):
            continue  # not run with a materialization (strata_verify runs it) / Dagster's own check
        assert left == [], f"{check_key.name}: {len(left)} planned partitions never evaluated"
        done = {record.partition for record in records}
        assert set(keys[:10]) <= done and None in done, check_key.name
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([check_key])[check_key]
        assert latest.partition is None, check_key.name


def test_a_slice_built_model_names_slices_of_its_key_not_partitions(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    from strata_dagster_tests.support.dagster_support import make_small_shop

    project, warehouse = make_small_shop(tmp_path, rows=300, days=12)

    def cli(*args):
        found = CliRunner().invoke(main, [args[0], str(project), "--warehouse", str(warehouse), *args[1:]])
        assert found.exit_code in (0, 1), found.output
        return found.output

    cli("run")
    order = paid_order(warehouse, 3)
    change_order(warehouse, order)
    cli("run", "--models", "stg_orders")
    planned = {item["model"]: item for item in json.loads(cli("plan", "--only-stale", "--json"))["models"]}
    tags = planned["order_tags"]
    assert tags["unit"] == "slice" and tags["partitions"] == [str(order)]
    assert f"1 slice of order_id to rebuild: {order}" in tags["why"]
    assert "partition" not in tags["why"].split("; ")[-1]
    assert planned["daily_revenue"]["unit"] == "partition"


def test_a_python_models_why_is_left_to_dagster_not_an_unknown_model(tmp_path):
    project, warehouse, home = example_workspace(tmp_path, days=12)
    defs = runpy.run_path(str(project / "definitions.py"))["defs"]
    strata = defs.resources[UNSCOPED.resource_key]
    graph = defs.resolve_asset_graph()
    keys = [dg.AssetKey("region_summary"), dg.AssetKey("stg_orders")]
    why = engine_why(strata, graph, keys, timeout=10)  # was E025: no model named `region_summary`
    assert set(why) == {dg.AssetKey("stg_orders")}


def test_the_descriptions_give_the_backfill_daemons_interval_as_dagster_has_it(shop):
    project, warehouse, defs, instance = shop
    assert c.BACKFILL_DAEMON_SECONDS == DEFAULT_DAEMON_INTERVAL_SECONDS
    for job in (UNSCOPED.materialize_all_job, UNSCOPED.backfill_range_job):
        description = defs.resolve_job_def(job).description
        assert c.BACKFILL_DAEMON_WAIT in description, job
    shipped = (REPO / "dagster.yaml").read_text()
    assert (
        "dequeue_interval_seconds: 1" in shipped
        and "the shipped 1 s is the run queue's" in c.BACKFILL_DAEMON_WAIT
    )


def test_a_warehouses_snapshot_folder_is_ignored_by_git():
    for path in ("examples/shop/warehouse.duckdb.snapshots/seg_1.parquet", "warehouse.duckdb.snapshots/x"):
        found = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert found.returncode == 0, path
