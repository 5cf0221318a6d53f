"""`strata_unit_tests`: an asset check running a model's unit tests (its `test` blocks).

The tests run in an in-memory DuckDB and only read the warehouse for its sources' schemas, so the
check is cheap (about 0.1 s a case): it runs in every run that materializes its model (Dagster
runs an asset's checks with it), which is every run after the model's code changes, and whenever
launched alone. It does not block: the snapshot is already published when it runs, and a failure
says the model's code no longer does what its tests say.
"""

from collections.abc import Iterator, Mapping
from typing import Any, Final

import dagster as dg

from strata_dagster.engine.unit_tests import UnitTestResult, run_unit_tests
from strata_dagster.errors import StrataError
from strata_dagster.language.definition import Project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.resources import StrataResource

UNIT_TEST_CHECK: Final = "strata_unit_tests"


def tested_models(project: Project) -> tuple[str, ...]:
    """Models that have at least one unit test, in dependency order."""
    tested = {test.model for test in project.tests}
    return tuple(name for name in project.order if name in tested)


def unit_test_checks(models: Mapping[dg.AssetKey, str], project: Project) -> dg.AssetChecksDefinition:
    """One op for the unit tests of `models` (asset key -> model): one in-memory database serves
    all the cases of a run."""
    counts = {name: sum(test.model == name for test in project.tests) for name in models.values()}
    specs = [
        dg.AssetCheckSpec(
            UNIT_TEST_CHECK,
            asset=key,
            description=f"`{model}`'s {counts[model]} unit test(s): the model over fixture rows gives the expected rows.",
            blocking=False,
            metadata={c.MODEL_KEY: model},
        )
        for key, model in models.items()
    ]

    @dg.multi_asset_check(
        name=UNIT_TEST_CHECK,
        specs=specs,
        can_subset=True,
        required_resource_keys={c.STRATA_RESOURCE_KEY},
        pool=c.DUCKDB_POOL,
        description="strata test: models over their fixture rows, in an in-memory DuckDB.",
    )
    def _unit_tests(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        strata: StrataResource = getattr(context.resources, c.STRATA_RESOURCE_KEY)
        selected = {key.asset_key: models[key.asset_key] for key in context.selected_asset_check_keys}
        try:
            report = run_unit_tests(strata.project_path, strata.warehouse_path, tuple(selected.values()))
        except StrataError as error:
            for key in selected:
                yield dg.AssetCheckResult(
                    asset_key=key,
                    check_name=UNIT_TEST_CHECK,
                    passed=False,
                    description=f"the unit tests cannot run: {error.message}",
                    metadata={"error": error.render()},
                )
            return
        for key, model in selected.items():
            results = report.of_model(model)
            failed = [result for result in results if not result.is_passed]
            yield dg.AssetCheckResult(
                asset_key=key,
                check_name=UNIT_TEST_CHECK,
                passed=not failed,
                description=_description(results, failed),
                metadata=_metadata(results, failed),
            )

    return _unit_tests


def _description(results: tuple[UnitTestResult, ...], failed: list[UnitTestResult]) -> str:
    if not failed:
        return f"{len(results)} unit test(s) pass"
    names = ", ".join(f"{result.name} ({result.location})" for result in failed)
    return f"{len(failed)} of {len(results)} unit test(s) fail: {names}"


def _metadata(results: tuple[UnitTestResult, ...], failed: list[UnitTestResult]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"passed": len(results) - len(failed), "failed": len(failed)}
    if failed:
        metadata["failures"] = dg.MetadataValue.json([result.as_json() for result in failed])
    return metadata
