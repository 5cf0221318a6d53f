"""Backfills from Dagster: runs of a Dagster backfill, of a `strata_backfill` job, or carrying a
correction tag need `strata/reason`. Without it (or with a bad correction) the run fails before
any step with E085 and the warehouse is not touched; with it, the engine records kind `backfill`,
the reason, the corrected run and the overrides, and every materialization shows them. Runs go
through the definitions' own executor, as under the daemon."""

import shutil

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.engine.run import run_project
from strata_dagster_tests.dagster_support import (
    UNPARTITIONED_MODELS,
    change_order,
    day_keys,
    execute_assets,
    history_entries,
    launch_in_process,
    make_small_shop,
    materializations,
    run_events,
    warehouse_digest,
)
from strata_dagster_tests.engine_support import execute
from strata_dagster_tests.test_dagster_staleness import paid_order

REASON = "strata/reason"
IN_DAGSTER_BACKFILL = {"dagster/backfill": "abcdefgh"}
FIRST_DAYS = (day_keys()[0], day_keys()[2])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small shop after one ordinary strata run of every model, with a corrected customers table."""
    project, warehouse = make_small_shop(tmp_path_factory.mktemp("built"))
    first = run_project(project, warehouse)
    execute(
        warehouse,
        "CREATE SCHEMA fixes; CREATE TABLE fixes.customers AS "
        "SELECT * REPLACE (CASE WHEN customer_id = 1 THEN 'fixed' ELSE region END AS region) FROM raw.customers",
    )
    return project, warehouse, first.run_id


@pytest.fixture
def shop(built, tmp_path):
    """A copy of the built shop's warehouse and the definitions over it."""
    project, template, first = built
    warehouse = tmp_path / template.name
    shutil.copy(template, warehouse)
    return build_definitions(project, warehouse=warehouse), warehouse, first


def failure_message(instance, run) -> str:
    (event,) = run_events(instance, run.run_id, dg.DagsterEventType.RUN_FAILURE)
    return event.dagster_event.event_specific_data.error.message


def assert_refused(instance, run, warehouse, before, needle):
    """Failed before any step, with E085 naming `needle`, and nothing written."""
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert run_events(instance, run.run_id, dg.DagsterEventType.STEP_START) == []
    message = failure_message(instance, run)
    assert "E085" in message and needle in message, message
    assert warehouse_digest(warehouse) == before


@pytest.mark.parametrize(
    ("names", "job", "tags"),
    [
        (["daily_revenue"], None, IN_DAGSTER_BACKFILL),
        (["stg_customers"], "strata_backfill", {}),
        (["daily_revenue"], "strata_backfill_daily_revenue_partitions", {}),
        (["stg_customers"], None, {"strata/source/customers": "fixes.customers"}),
        (["stg_customers"], None, {"strata/full_refresh": "true"}),
    ],
    ids=[
        "dagster-backfill",
        "backfill-job",
        "partitioned-backfill-job",
        "correction-tag",
        "full-refresh-tag",
    ],
)
def test_a_backfill_without_a_reason_fails_before_any_step_and_writes_nothing(shop, names, job, tags):
    defs, warehouse, _ = shop
    before = warehouse_digest(warehouse)
    partitions = FIRST_DAYS if names == ["daily_revenue"] else None
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, names, job=job, partitions=partitions, tags=tags)
        assert_refused(instance, run, warehouse, before, "has no `strata/reason` tag")
        assert "Add tags to backfill runs" in failure_message(instance, run)


def test_ordinary_and_automation_runs_need_no_reason(shop):
    defs, warehouse, _ = shop
    change_order(warehouse, paid_order(warehouse))
    with dg.DagsterInstance.ephemeral() as instance:
        assert launch_in_process(defs, instance, ["stg_orders"]).status == dg.DagsterRunStatus.SUCCESS
        automation = {**IN_DAGSTER_BACKFILL, "dagster/from_automation_condition": "true"}
        run = launch_in_process(defs, instance, ["daily_revenue"], partitions=FIRST_DAYS, tags=automation)
        assert run.status == dg.DagsterRunStatus.SUCCESS
    assert [entry.kind for entry in history_entries(warehouse)] == ["run", "run", "run"]


def test_a_backfill_with_a_reason_is_recorded_in_the_history_and_on_every_materialization(shop):
    defs, warehouse, _ = shop
    order = paid_order(warehouse)
    change_order(warehouse, order)
    tags = {**IN_DAGSTER_BACKFILL, REASON: "late payment corrections"}
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, ["daily_revenue"], partitions=FIRST_DAYS, tags=tags)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        events = run_events(instance, run.run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
    entry = history_entries(warehouse)[-1]
    assert (entry.kind, entry.reason, entry.backfill_of) == ("backfill", "late payment corrections", None)
    assert entry.models == ("daily_revenue",)
    metadata = [event.asset_materialization.metadata for event in events]
    assert sorted(event.asset_materialization.partition for event in events) == day_keys()[:3]
    for item in metadata:
        assert item["strata/reason"].value == "late payment corrections"
        assert item["strata/kind"].value == "backfill"
        assert item["strata/run_id"].value == entry.run_id


def test_backfill_of_records_the_corrected_run(shop):
    defs, warehouse, first = shop
    change_order(warehouse, paid_order(warehouse))
    tags = {REASON: "reload after the extract fix", "strata/backfill_of": first[:12]}
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, ["stg_orders"], job="strata_backfill", tags=tags)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        (event,) = run_events(instance, run.run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
    entry = history_entries(warehouse)[-1]
    assert (entry.kind, entry.backfill_of, entry.reason) == (
        "backfill",
        first,
        "reload after the extract fix",
    )
    assert event.asset_materialization.metadata["strata/backfill_of"].value == first


def test_a_source_tag_reads_the_corrected_table(shop):
    defs, warehouse, _ = shop
    tags = {**IN_DAGSTER_BACKFILL, REASON: "region fix", "strata/source/customers": "fixes.customers"}
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, ["stg_customers"], tags=tags)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        # The corrected table is not the source: Dagster's version of `customers` is left alone.
        assert run_events(instance, run.run_id, dg.DagsterEventType.ASSET_OBSERVATION) == []
    entry = history_entries(warehouse)[-1]
    assert (entry.kind, entry.overrides) == ("backfill", {"customers": "fixes.customers"})
    assert execute(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1") == [("fixed",)]


@pytest.mark.parametrize(
    ("tags", "needle"),
    [
        ({REASON: "   "}, "has no `strata/reason` tag"),
        ({"strata/backfill_of": "deadbeefdead"}, "no run `deadbeefdead`"),
        ({"strata/backfill_of": " "}, "`strata/backfill_of` is empty"),
        ({"strata/source/nope": "fixes.customers"}, "names no source"),
        ({"strata/source/customers": ""}, "is not a table name"),
        ({"strata/source/customers": "a..b"}, "is not a table name"),
        ({"strata/source/customers": "fixes.absent"}, "no table `fixes.absent`"),
        ({"strata/full_refresh": "yes"}, "tag `strata/full_refresh` is `yes`"),
    ],
)
def test_bad_backfill_tags_are_e085_before_any_step(shop, tags, needle):
    defs, warehouse, _ = shop
    before = warehouse_digest(warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(
            defs, instance, ["stg_customers"], tags={**IN_DAGSTER_BACKFILL, REASON: "fix", **tags}
        )
        assert_refused(instance, run, warehouse, before, needle)


def test_execute_in_process_is_refused_at_the_first_write(shop):
    """`execute_in_process` and `materialize()` run Dagster's own executor: the IO manager refuses."""
    defs, warehouse, _ = shop
    before = warehouse_digest(warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        result = execute_assets(defs, instance, ["stg_customers"], tags=IN_DAGSTER_BACKFILL)
    assert not result.success
    assert "E085" in str(result.failure_data_for_node("stg_customers").error)
    assert materializations(result, "stg_customers") == []
    assert warehouse_digest(warehouse) == before


def test_one_backfill_job_per_partitioning_over_the_strata_models(shop):
    defs, _, _ = shop
    selections = {
        name: sorted(
            key.to_user_string() for key in defs.resolve_job_def(name).asset_layer.selected_asset_keys
        )
        for name in (
            "strata_backfill",
            "strata_backfill_daily_revenue_partitions",
            "strata_backfill_monthly_revenue_partitions",
        )
    }
    assert selections == {
        "strata_backfill": sorted(UNPARTITIONED_MODELS),
        "strata_backfill_daily_revenue_partitions": ["daily_revenue"],
        "strata_backfill_monthly_revenue_partitions": ["monthly_revenue"],
    }


def test_a_full_refresh_tag_rebuilds_the_backfills_models_from_all_their_input(shop):
    defs, warehouse, first = shop
    order = paid_order(warehouse)
    # Not stamped with a later updated_at: a delta, and a backfill without the tag, never see it.
    execute(warehouse, "UPDATE raw.orders SET amount = 4321.00 WHERE order_id = ?", params=[order])
    tags = {REASON: "reload the silent edits", "strata/backfill_of": first, "strata/full_refresh": "true"}
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, ["stg_orders"], job="strata_backfill", tags=tags)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        (event,) = run_events(instance, run.run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
    metadata = event.asset_materialization.metadata
    assert metadata["strata/full_refresh"].value is True
    assert metadata["strata/path"].value == "full"
    entry = history_entries(warehouse)[-1]
    assert (entry.kind, entry.detail["full_refresh"]) == ("backfill", True)
    amount = execute(warehouse, "SELECT amount FROM main.v_stg_orders WHERE order_id = ?", params=[order])
    assert str(amount[0][0]) == "4321.00"
