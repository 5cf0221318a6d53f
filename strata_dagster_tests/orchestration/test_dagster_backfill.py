"""Backfills from Dagster: runs of a Dagster backfill, of a `strata_backfill` job, or carrying a
correction tag need `strata/reason`. Without it (or with a bad correction) the run is refused
before any step with E085, ends CANCELED (its partitions are not marked failed), and the warehouse
is not touched; with it, the engine records kind `backfill`,
the reason, the corrected run and the overrides, and every materialization shows them. Runs go
through the definitions' own executor, as under the daemon."""

import logging
import shutil

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.engine.run import run_project
from strata_dagster.orchestration.jobs.executor import REFUSED_WROTE
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    UNPARTITIONED_MODELS,
    change_order,
    content_materializations,
    day_keys,
    execute_assets,
    history_entries,
    launch_in_process,
    make_small_shop,
    materializations,
    run_events,
    warehouse_digest,
)
from strata_dagster_tests.support.engine_support import execute

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


def refusal_message(instance, run) -> str:
    (event,) = run_events(instance, run.run_id, dg.DagsterEventType.RUN_CANCELED)
    return event.message


def assert_refused(instance, run, warehouse, before, needle):
    """Refused before any step (CANCELED), with E085 naming `needle` and no stack trace on any
    event, and nothing written."""
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run_events(instance, run.run_id, dg.DagsterEventType.STEP_START) == []
    message = refusal_message(instance, run)
    assert message.startswith("error[E085]") and needle in message, message
    errors = [
        record.dagster_event.event_specific_data.error
        for record in instance.all_logs(run.run_id)
        if record.dagster_event is not None
        and getattr(record.dagster_event.event_specific_data, "error", None) is not None
    ]
    assert errors == [], errors
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
        assert "Add tags to backfill runs" in refusal_message(instance, run)


def test_the_refusal_is_an_error_line_of_the_run_log_with_the_code_and_the_fix(shop):
    defs, _, _ = shop
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, ["stg_customers"], job="strata_backfill")
        (line,) = [
            entry
            for entry in instance.all_logs(run.run_id)
            if entry.dagster_event is None and entry.user_message.startswith("error[E085]")
        ]
    assert line.level == logging.ERROR
    assert "has no `strata/reason` tag" in line.user_message
    assert "Add tags to backfill runs" in line.user_message
    assert line.user_message.endswith(REFUSED_WROTE)


def test_a_refused_backfill_leaves_its_partitions_as_they_were_not_failed(shop):
    """Dagster marks a partition failed when the latest run planned for it FAILED; a refused run
    wrote nothing, so a missing partition stays missing and a materialized one materialized."""
    defs, _, _ = shop
    days = day_keys()[:4]
    partitions_def = defs.resolve_asset_graph().get(dg.AssetKey("daily_revenue")).partitions_def
    with dg.instance_for_test() as instance:
        built = launch_in_process(
            defs, instance, ["daily_revenue"], partitions=(days[0], days[0]), tags={REASON: "first load"}
        )
        assert built.status == dg.DagsterRunStatus.SUCCESS
        refused = launch_in_process(
            defs, instance, ["daily_revenue"], partitions=(days[0], days[2]), tags=IN_DAGSTER_BACKFILL
        )
        assert refused.status == dg.DagsterRunStatus.CANCELED
        status = instance.get_status_by_partition(dg.AssetKey("daily_revenue"), days, partitions_def)
    assert status == {
        days[0]: dg.AssetPartitionStatus.MATERIALIZED,
        days[1]: None,
        days[2]: None,
        days[3]: None,
    }


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
        # Only daily_revenue's: the step also records what Dagster lacked of stg_orders (built before,
        # outside Dagster) and the companion's days (one history: test_dagster_one_history).
        events = [
            event
            for event in content_materializations(instance, run.run_id)
            if event.asset_materialization.asset_key == dg.AssetKey("daily_revenue")
        ]
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
        (event,) = [  # stg_orders's; the companion's days are recorded beside it
            event
            for event in run_events(instance, run.run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
            if event.asset_materialization.asset_key == dg.AssetKey("stg_orders")
        ]
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
        ({"strata/backfill_of": "deadbeefdead"}, "backfill cannot start (E023): no run `deadbeefdead`"),
        ({"strata/backfill_of": " "}, "`strata/backfill_of` is empty"),
        ({"strata/source/nope": "fixes.customers"}, "names no source"),
        ({"strata/source/customers": ""}, "(E022): `` is not a table name"),
        ({"strata/source/customers": "a..b"}, "is not a table name"),
        ({"strata/source/customers": "fixes.absent"}, "backfill cannot start (E022): "),
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


def test_a_pin_failure_during_a_dagster_backfill_is_e085_naming_the_pin(shop):
    """As `strata backfill`: the build's own failure (here `unique: [customer_id]` on a corrected
    table with a duplicate) is E085, its cause's code in the message, and nothing is published."""
    defs, warehouse, _ = shop
    execute(
        warehouse,
        "CREATE TABLE fixes.dupes AS SELECT * FROM fixes.customers "
        "UNION ALL SELECT * FROM fixes.customers WHERE customer_id = 2",
    )
    before = history_entries(warehouse)
    tags = {**IN_DAGSTER_BACKFILL, REASON: "dupes", "strata/source/customers": "fixes.dupes"}
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(defs, instance, ["stg_customers"], tags=tags)
        assert run.status == dg.DagsterRunStatus.FAILURE
        (failure,) = run_events(instance, run.run_id, dg.DagsterEventType.STEP_FAILURE)
    description = failure.dagster_event.step_failure_data.user_failure_data.description
    assert description.startswith("error[E085]: backfill failed (E030): "), description
    assert history_entries(warehouse) == before


def test_execute_in_process_is_refused_at_the_first_write(shop):
    """`execute_in_process` and `materialize()` run Dagster's own executor: the IO manager refuses."""
    defs, warehouse, _ = shop
    before = warehouse_digest(warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        result = execute_assets(defs, instance, ["stg_customers"], tags=IN_DAGSTER_BACKFILL)
    assert not result.success
    # The step that builds the unpartitioned models (stg_customers among them) refused.
    assert "E085" in str(result.failure_data_for_node(UNSCOPED.models_op("unpartitioned")).error)
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
        (event,) = [  # stg_orders's; the companion's days are recorded beside it
            event
            for event in run_events(instance, run.run_id, dg.DagsterEventType.ASSET_MATERIALIZATION)
            if event.asset_materialization.asset_key == dg.AssetKey("stg_orders")
        ]
    metadata = event.asset_materialization.metadata
    assert metadata["strata/full_refresh"].value is True
    assert metadata["strata/path"].value == "full"
    entry = history_entries(warehouse)[-1]
    assert (entry.kind, entry.detail["full_refresh"]) == ("backfill", True)
    amount = execute(warehouse, "SELECT amount FROM main.v_stg_orders WHERE order_id = ?", params=[order])
    assert str(amount[0][0]) == "4321.00"


def test_partitioned_models_and_the_backfill_jobs_name_the_backfill_tags(shop):
    """Where a user looks before launching a backfill: the asset's description, the job's."""
    defs, _, _ = shop
    graph = defs.resolve_asset_graph()
    tags = ("`strata/reason`", "`strata/backfill_of`", "`strata/source/<source>`", "`strata/full_refresh`")
    described = [graph.get(dg.AssetKey(name)).description for name in ("daily_revenue", "monthly_revenue")]
    described += [
        defs.resolve_job_def(name).description
        for name in (
            "strata_backfill",
            "strata_backfill_daily_revenue_partitions",
            "strata_backfill_monthly_revenue_partitions",
        )
    ]
    for description in described:
        assert all(tag in description for tag in tags), description
        assert "Add tags to backfill runs" in description
    # The model's own description comes first; unpartitioned models are not cluttered.
    assert graph.get(dg.AssetKey("daily_revenue")).description.startswith("Paid and shipped revenue per day")
    assert "strata/reason" not in graph.get(dg.AssetKey("stg_orders")).description


def test_a_backfill_of_other_assets_in_the_code_location_is_not_stratas_business(shop):
    """The guard checks the strata project whose assets a run materializes: a Dagster backfill's
    run of a user's own asset in the same code location runs without `strata/reason`."""
    defs, warehouse, _ = shop

    @dg.asset
    def a_users_asset() -> None:
        return None

    merged = dg.Definitions.merge(defs, dg.Definitions(assets=[a_users_asset]))
    before = warehouse_digest(warehouse)
    with dg.DagsterInstance.ephemeral() as instance:
        run = launch_in_process(merged, instance, ["a_users_asset"], tags=IN_DAGSTER_BACKFILL)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert instance.get_latest_materialization_event(dg.AssetKey("a_users_asset")) is not None
        # The same backfill tags on a strata model's run: refused.
        refused = launch_in_process(merged, instance, ["stg_customers"], tags=IN_DAGSTER_BACKFILL)
        assert refused.status == dg.DagsterRunStatus.CANCELED
    assert warehouse_digest(warehouse) == before
