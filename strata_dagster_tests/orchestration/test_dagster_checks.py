"""Asset checks: `strata_unique` / `strata_contract` on the live views after every materialization,
and `strata_incremental_equals_full` (engine.commands.verify) in the `strata_verify` job and its schedule,
with verify's figures in the check metadata. Real Dagster runs over real DuckDB files."""

import runpy
import shutil
from decimal import Decimal

import dagster as dg
import polars as pl
import pytest

from strata_dagster import build_definitions, strata_python_model
from strata_dagster.orchestration.checks.model_checks import (
    CONTRACT_CHECK,
    EQUIVALENCE_CHECK,
    SCHEMA_CHANGE_CHECK,
    UNIQUE_CHECK,
    VERIFY_TAG,
)
from strata_dagster.orchestration.checks.stale_partitions import STALE_PARTITIONS_CHECK
from strata_dagster.orchestration.checks.unit_tests import UNIT_TEST_CHECK
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster_tests.engine.commands.test_verify import replace_live
from strata_dagster_tests.support.dagster_support import (
    DAYS,
    execute_assets,
    make_small_shop,
    materialize_everything,
    observe_sources,
)
from strata_dagster_tests.support.engine_support import SHOP, VERIFY_COUNTS, execute

CHECKS_OP = UNSCOPED.checks_op
VERIFY_JOB = UNSCOPED.verify_job
VERIFY_SCHEDULE = UNSCOPED.verify_schedule

UNIQUE = {
    "stg_orders",
    "stg_customers",
    "first_seen_orders",
    "orders_enriched",
    "order_tags",
    "daily_revenue",
    "monthly_revenue",
    "region_summary",
}
CONTRACT = {"stg_customers", "daily_revenue", "region_summary"}
VERIFIABLE = {"stg_orders", "order_status_log", "first_seen_orders", "daily_revenue", "monthly_revenue"}
# Every SQL model of the shop has unit tests (examples/shop/tests.strata).
TESTED = UNIQUE - {"region_summary"} | {"order_status_log", "order_timeline"}


@strata_python_model(unique=["region"], contract={"region": "VARCHAR not null"}, code_version="1")
def region_summary(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return orders_enriched.group_by("region").agg(orders=pl.len()).sort("region")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The small shop, every model and the Python model materialized through Dagster once."""
    project, warehouse = make_small_shop(tmp_path_factory.mktemp("checks"))
    defs = build_definitions(project, warehouse=warehouse, python_assets=[region_summary])
    instance = dg.DagsterInstance.ephemeral()
    materialize_everything(defs, instance)
    assert execute_assets(defs, instance, ["region_summary"]).success
    return project, warehouse, instance


@pytest.fixture
def shop(built, tmp_path):
    """A copy of the built warehouse for one test, with definitions over it and a new instance."""
    project, warehouse, _ = built
    copy = tmp_path / "warehouse.duckdb"
    shutil.copy(warehouse, copy)
    defs = build_definitions(project, warehouse=copy, python_assets=[region_summary])
    return project, copy, defs, dg.DagsterInstance.ephemeral()


def evaluations(result) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    return {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}


def history(instance, name, check, limit=100):
    key = dg.AssetCheckKey(dg.AssetKey(name), check)
    return instance.event_log_storage.get_asset_check_execution_history(key, limit=limit)


def values(evaluation: dg.AssetCheckEvaluation) -> dict:
    return {key: getattr(value, "value", value) for key, value in evaluation.metadata.items()}


def counts(metadata: dict) -> tuple[int, ...]:
    return tuple(metadata[name] for name in VERIFY_COUNTS)


def run_checks(defs, instance, names, check_name):
    """A checks-only run of `check_name` on the named assets (as the UI's *Execute* button)."""
    keys = {dg.AssetCheckKey(dg.AssetKey(name), check_name) for name in names}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=keys
    )
    return job.execute_in_process(instance=instance, raise_on_error=False)


def verify_job(defs, instance):
    result = defs.resolve_job_def(VERIFY_JOB).execute_in_process(instance=instance, raise_on_error=False)
    assert result.success
    return evaluations(result)


def test_definitions_carry_the_checks_a_verify_job_and_a_stopped_schedule(shop):
    project, warehouse, defs, _ = shop
    checks = {
        (key.asset_key.to_user_string(), key.name) for key in defs.resolve_asset_graph().asset_check_keys
    }
    assert checks == (
        {(name, UNIQUE_CHECK) for name in UNIQUE}
        | {(name, CONTRACT_CHECK) for name in CONTRACT}
        | {(name, SCHEMA_CHANGE_CHECK) for name in CONTRACT}
        | {(name, EQUIVALENCE_CHECK) for name in VERIFIABLE}
        | {(name, UNIT_TEST_CHECK) for name in TESTED}
        | {(name, STALE_PARTITIONS_CHECK) for name in ("daily_revenue", "monthly_revenue")}
    )
    layer = defs.resolve_job_def(VERIFY_JOB).asset_layer
    assert layer.selected_asset_keys == set()  # it materializes nothing
    assert layer.asset_graph.asset_check_keys == {
        dg.AssetCheckKey(dg.AssetKey(name), EQUIVALENCE_CHECK) for name in VERIFIABLE
    }
    schedule = defs.resolve_schedule_def(VERIFY_SCHEDULE)
    assert (schedule.cron_schedule, schedule.job_name) == ("0 3 * * *", VERIFY_JOB)
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    dg.Definitions.validate_loadable(defs)
    hourly = build_definitions(
        project,
        warehouse=warehouse,
        verification_schedule="0 * * * *",
        verification_schedule_status=dg.DefaultScheduleStatus.RUNNING,
    )
    schedule = hourly.resolve_schedule_def(VERIFY_SCHEDULE)
    assert (schedule.cron_schedule, schedule.default_status) == (
        "0 * * * *",
        dg.DefaultScheduleStatus.RUNNING,
    )
    without = build_definitions(project, warehouse=warehouse, verification_schedule=None)
    assert not list(without.schedules or ()) and without.resolve_job_def(VERIFY_JOB)


def test_the_example_definitions_load_with_the_verify_job_and_schedule(built, monkeypatch):
    _, warehouse, _ = built
    monkeypatch.setenv("STRATA_WAREHOUSE", str(warehouse))
    defs = runpy.run_path(str(SHOP / "definitions.py"))["defs"]
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_schedule_def(VERIFY_SCHEDULE).job_name == VERIFY_JOB
    graph = defs.resolve_asset_graph()
    assert dg.AssetCheckKey(dg.AssetKey("region_summary"), UNIQUE_CHECK) in graph.asset_check_keys


def test_a_correct_build_passes_every_check_with_all_figures_zero(built, shop):
    _, _, instance = built
    # The module's materialization runs measured every pin on the live views, and skipped the
    # equivalence checks (a full rebuild each time).
    pins = [(name, UNIQUE_CHECK) for name in UNIQUE] + [(name, CONTRACT_CHECK) for name in CONTRACT]
    for name, check in pins:
        (record,) = history(instance, name, check, limit=1)
        assert record.status.value == "SUCCEEDED", (name, check)
    for name in VERIFIABLE:
        assert {record.status.value for record in history(instance, name, EQUIVALENCE_CHECK)} == {"PLANNED"}

    _, warehouse, defs, fresh = shop
    found = verify_job(defs, fresh)
    assert set(found) == {(name, EQUIVALENCE_CHECK) for name in VERIFIABLE}
    for (name, _), evaluation in found.items():
        metadata = values(evaluation)
        assert evaluation.passed and metadata["is_equal"], name
        assert counts(metadata) == (0, 0, 0, 0, 0), name
        assert all(total["is_equal"] for total in metadata["numeric_totals"].values()), name
    log = values(found[("order_status_log", EQUIVALENCE_CHECK)])
    assert log["merge_strategy"] == "append" and log["history_rows"] == 0
    assert values(found[("first_seen_orders", EQUIVALENCE_CHECK)])["compared_columns"] == ["order_id"]
    daily = values(found[("daily_revenue", EQUIVALENCE_CHECK)])
    assert daily["partitioned_by"] == "day(order_day)" and daily["partitions_compared"] == DAYS
    assert daily["mismatched_partitions"] == [] and daily["partition_figures"] == {}

    pins = evaluations(run_checks(defs, fresh, ["stg_orders", "region_summary"], UNIQUE_CHECK))
    orders = values(pins[("stg_orders", UNIQUE_CHECK)])
    assert orders["duplicate_keys"] == 0 and orders["sample_duplicate_keys"] == []
    assert orders["rows"] == execute(warehouse, "SELECT count(*) FROM main.v_stg_orders")[0][0]
    contract = evaluations(run_checks(defs, fresh, ["daily_revenue"], CONTRACT_CHECK))
    assert values(contract[("daily_revenue", CONTRACT_CHECK)])["mismatches"] == 0


def test_a_silent_source_edit_fails_the_equivalence_check_with_exact_counts(shop):
    """A source row changed without advancing `cdc_column`: the next delta build cannot see it."""
    _, warehouse, defs, instance = shop
    order_id, day = execute(
        warehouse,
        "SELECT order_id, order_day FROM main.v_stg_orders WHERE status IN ('paid', 'shipped') "
        "ORDER BY order_id LIMIT 1",
    )[0]
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 10 WHERE order_id = ?", params=[order_id])
    observe_sources(defs, instance)
    built = execute_assets(defs, instance, ["stg_orders"])
    assert built.success
    found = evaluations(built)
    assert found[("stg_orders", UNIQUE_CHECK)].passed  # pins hold: the drift is in the values
    assert ("stg_orders", EQUIVALENCE_CHECK) not in found  # skipped in the materializing run

    found = verify_job(defs, instance)
    orders = found[("stg_orders", EQUIVALENCE_CHECK)]
    assert not orders.passed and orders.severity == dg.AssetCheckSeverity.ERROR
    metadata = values(orders)
    # The changed row: its old version only live, its new version only in the full rebuild.
    assert counts(metadata) == (0, 1, 1, 0, 2)
    amount = metadata["numeric_totals"]["amount"]
    assert Decimal(amount["full"]) - Decimal(amount["incremental"]) == Decimal("10.00")
    assert not amount["is_equal"]
    assert "row delta +0" in orders.description and "amount" in orders.description

    daily = values(found[("daily_revenue", EQUIVALENCE_CHECK)])
    assert daily["mismatched_partitions"] == [day.isoformat()]
    assert list(daily["partition_figures"]) == [day.isoformat()]
    assert counts(daily["partition_figures"][day.isoformat()]) == (0, 1, 1, 0, 2)
    monthly = values(found[("monthly_revenue", EQUIVALENCE_CHECK)])
    assert monthly["mismatched_partitions"] == [day.replace(day=1).isoformat()]
    # History models read the source only through their own rows: order_status_log has no amount,
    # first_seen_orders is compared on its keys.
    assert found[("order_status_log", EQUIVALENCE_CHECK)].passed
    assert found[("first_seen_orders", EQUIVALENCE_CHECK)].passed

    # A run tagged strata/verify=always verifies what it materializes, in the same run.
    tagged = execute_assets(defs, instance, ["stg_orders"], tags={VERIFY_TAG: "always"})
    assert counts(values(evaluations(tagged)[("stg_orders", EQUIVALENCE_CHECK)])) == (0, 1, 1, 0, 2)


def test_a_partitioned_model_reports_the_differing_partition(shop):
    _, warehouse, defs, instance = shop
    day, region = execute(
        warehouse,
        "SELECT order_day, min(region) FROM main.v_daily_revenue GROUP BY 1 ORDER BY 1 DESC LIMIT 1",
    )[0]
    replace_live(
        warehouse,
        "daily_revenue",
        f"UPDATE drift.daily_revenue SET revenue = revenue + 1 WHERE order_day = '{day}' AND region = '{region}'",
    )
    found = run_checks(defs, instance, ["daily_revenue", "monthly_revenue"], EQUIVALENCE_CHECK)
    assert found.success
    daily = evaluations(found)[("daily_revenue", EQUIVALENCE_CHECK)]
    metadata = values(daily)
    assert not daily.passed and metadata["mismatched_partitions"] == [day.isoformat()]
    assert metadata["partitions_compared"] == DAYS and counts(metadata) == (0, 1, 1, 0, 2)
    figures = metadata["partition_figures"][day.isoformat()]
    assert counts(figures) == (0, 1, 1, 0, 2) and figures["full_rows"] == figures["incremental_rows"]
    revenue = figures["numeric_totals"]["revenue"]
    assert Decimal(revenue["incremental"]) - Decimal(revenue["full"]) == 1
    assert f"in partition(s) {day.isoformat()}" in daily.description
    assert evaluations(found)[("monthly_revenue", EQUIVALENCE_CHECK)].passed


def test_pins_broken_behind_the_engines_back_fail_their_checks(shop):
    """The engine refuses to publish a snapshot that breaks a pin, so break the live views out of
    band: a duplicated order, and customers with a NULL key and a column of another type."""
    _, warehouse, defs, instance = shop
    order_id = execute(warehouse, "SELECT min(order_id) FROM main.v_stg_orders")[0][0]
    replace_live(
        warehouse,
        "stg_orders",
        f"INSERT INTO drift.stg_orders SELECT * FROM drift.stg_orders WHERE order_id = {order_id}",
    )
    replace_live(
        warehouse,
        "stg_customers",
        "UPDATE drift.stg_customers SET customer_id = NULL WHERE customer_id IN "
        "(SELECT customer_id FROM drift.stg_customers ORDER BY 1 LIMIT 2)",
        "ALTER TABLE drift.stg_customers ALTER signup_date TYPE VARCHAR",
    )
    found = evaluations(run_checks(defs, instance, ["stg_orders", "stg_customers"], UNIQUE_CHECK))
    orders = found[("stg_orders", UNIQUE_CHECK)]
    assert not orders.passed and orders.severity == dg.AssetCheckSeverity.ERROR
    metadata = values(orders)
    assert (metadata["duplicate_keys"], metadata["rows_with_duplicate_keys"], metadata["max_copies"]) == (
        1,
        2,
        2,
    )
    assert metadata["sample_duplicate_keys"] == [{"order_id": order_id, "copies": 2}]
    # Two NULL keys are one repeated key value, as the build gate counts them.
    customers = values(found[("stg_customers", UNIQUE_CHECK)])
    assert customers["sample_duplicate_keys"] == [{"customer_id": None, "copies": 2}]

    contract = evaluations(run_checks(defs, instance, ["stg_customers"], CONTRACT_CHECK))
    evaluation = contract[("stg_customers", CONTRACT_CHECK)]
    metadata = values(evaluation)
    assert not evaluation.passed and metadata["mismatches"] == 2
    assert metadata["null_violations"] == {"customer_id": 2}
    assert metadata["type_mismatches"] == {"signup_date": {"expected": "DATE", "actual": "VARCHAR"}}
    assert metadata["missing_columns"] == [] and metadata["columns_checked"] == 7
    assert "`signup_date` is VARCHAR, the contract says DATE" in evaluation.description


def test_checks_of_models_not_published_on_the_branch_warn(shop):
    project, warehouse, _, instance = shop
    defs = build_definitions(project, warehouse=warehouse, branch="nowhere")
    found = verify_job(defs, instance)
    assert set(found) == {(name, EQUIVALENCE_CHECK) for name in VERIFIABLE}
    for evaluation in found.values():
        assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
        assert "not published on branch `nowhere`" in evaluation.description
    pins = evaluations(run_checks(defs, instance, ["stg_orders"], UNIQUE_CHECK))
    assert pins[("stg_orders", UNIQUE_CHECK)].severity == dg.AssetCheckSeverity.WARN


def test_a_runs_strata_checks_are_one_step_and_one_kinds_error_leaves_the_others_reported(shop):
    """Every strata check of a run runs in one step (`strata_checks`). A project that no longer
    compiles after the definitions loaded: the stale-partitions reading raises E001, the unit tests
    report that they cannot run, the pins (read from the live views) still pass, and the step
    fails with the strata message, not a stack trace."""
    project, _, defs, instance = shop
    keys = {
        dg.AssetCheckKey(dg.AssetKey("daily_revenue"), name)
        for name in (UNIQUE_CHECK, UNIT_TEST_CHECK, STALE_PARTITIONS_CHECK)
    }
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=keys
    )
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert result.success
    assert [event.step_key for event in result.all_events if event.is_step_start] == [CHECKS_OP]
    assert {key[1] for key, evaluation in evaluations(result).items() if evaluation.passed} == {
        UNIQUE_CHECK,
        UNIT_TEST_CHECK,
        STALE_PARTITIONS_CHECK,
    }

    marts = project / "marts.strata"
    text = marts.read_text()
    marts.write_text(text.replace("from stg_orders", "frm stg_orders", 1))
    try:  # a new instance: the unit tests' last evaluation (passed, same code) is not reused
        result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    finally:
        marts.write_text(text)
    assert not result.success
    found = evaluations(result)
    assert found[("daily_revenue", UNIQUE_CHECK)].passed
    tests = found[("daily_revenue", UNIT_TEST_CHECK)]
    assert not tests.passed and "cannot run" in tests.description
    assert ("daily_revenue", STALE_PARTITIONS_CHECK) not in found
    [failure] = [event for event in result.all_events if event.is_step_failure]
    error = failure.step_failure_data.user_failure_data
    assert error is not None and "error[E001]" in error.description
