"""`strata_unit_tests`: the asset check that runs a model's unit tests, in the run that
materializes the model and alone, against a real Dagster instance and DuckDB file."""

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.orchestration.checks.unit_tests import (
    TESTS_RAN_IN_KEY,
    UNCHANGED_KEY,
    UNIT_TEST_CHECK,
)
from strata_dagster_tests.support.dagster_support import (
    execute_assets,
    make_small_shop,
    observe_sources,
    warehouse_digest,
)


def evaluations(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {
        e.asset_key.to_user_string(): e
        for e in result.get_asset_check_evaluations()
        if e.check_name == UNIT_TEST_CHECK
    }


def checks_only(defs, instance, names):
    keys = {dg.AssetCheckKey(dg.AssetKey(name), UNIT_TEST_CHECK) for name in names}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=keys
    )
    return job.execute_in_process(instance=instance, raise_on_error=False)


def test_the_check_runs_with_each_materialization_and_reports_a_failing_case(tmp_path):
    project, warehouse = make_small_shop(tmp_path, rows=300, days=5)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    result = execute_assets(defs, instance, ["stg_customers", "stg_orders"])
    assert result.success
    found = evaluations(result)
    assert set(found) == {"stg_customers", "stg_orders"}
    assert found["stg_orders"].passed and found["stg_orders"].metadata["passed"].value == 2
    assert found["stg_customers"].description == "1 unit test passes"
    first = result.run_id
    assert found["stg_customers"].metadata[TESTS_RAN_IN_KEY].value == first

    # Unchanged code and tests: the next materialization passes the check without running them.
    again = evaluations(execute_assets(defs, instance, ["stg_customers"]))["stg_customers"]
    assert again.passed and again.metadata[UNCHANGED_KEY].value == first
    assert again.description.startswith(f"unchanged since run {first[:8]}")
    assert again.metadata[TESTS_RAN_IN_KEY].value == first

    # A test's text changed: the tests run again (and pass).
    tests = project / "tests.strata"
    tests.write_text(tests.read_text().replace("date '2024-03-17'", "date '2024-03-18'"))
    defs = build_definitions(project, warehouse=warehouse)
    edited = execute_assets(defs, instance, ["stg_customers"])
    rerun = evaluations(edited)["stg_customers"]
    assert rerun.passed and UNCHANGED_KEY not in rerun.metadata
    assert rerun.metadata[TESTS_RAN_IN_KEY].value == edited.run_id

    # Break the code: the model no longer does what its test says.
    module = project / "staging.strata"
    text = module.read_text()
    assert "is_business = segment <> 'consumer'" in text
    module.write_text(
        text.replace("is_business = segment <> 'consumer'", "is_business = segment = 'consumer'")
    )
    defs = build_definitions(project, warehouse=warehouse)
    result = execute_assets(defs, instance, ["stg_customers"])
    assert result.success  # the check does not block: the run itself succeeds
    check = evaluations(result)["stg_customers"]
    assert not check.passed and UNCHANGED_KEY not in check.metadata  # the code changed: run again
    assert "derives_columns" in check.description and "tests.strata:46" in check.description
    (failure,) = check.metadata["failures"].value
    assert [row["values"] for row in failure["missing"]] == [
        ["1", "date '2024-03-01'", "false"],
        ["2", "date '2024-12-01'", "true"],
    ]
    assert [row["values"] for row in failure["unexpected"]] == [
        ["1", "date '2024-03-01'", "true"],
        ["2", "date '2024-12-01'", "false"],
    ]

    # Alone (the UI's Execute button), it reads the warehouse without writing it.
    before = warehouse_digest(warehouse)
    alone = evaluations(checks_only(defs, instance, ["stg_customers", "daily_revenue"]))
    assert not alone["stg_customers"].passed and alone["daily_revenue"].passed
    assert warehouse_digest(warehouse) == before
