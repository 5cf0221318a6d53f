"""`strata_unit_tests`: an asset check running a model's unit tests (its `test` blocks).

The tests run in an in-memory DuckDB and only read the warehouse for its sources' schemas. Dagster
runs an asset's checks with every materialization of it, yet the tests' outcome depends only on
the model's code (its code version, which covers its upstream code too) and its tests: each
evaluation records a key of both, and while the key is the one of the last passing evaluation the
check passes again at once, saying since which run the tests are unchanged, instead of running
them (about a second a materialization saved). It does not block: the snapshot is already
published when it runs, and a failure says the model's code no longer does what its tests say.
"""

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import dagster as dg

from strata_dagster.engine.commands.unit_tests import UnitTestResult, run_unit_tests
from strata_dagster.errors import StrataError
from strata_dagster.language.definition import ModelTest, Project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.family import CheckFamily
from strata_dagster.orchestration.resources.strata import StrataResource
from strata_dagster.wording import counted

UNIT_TEST_CHECK: Final = "strata_unit_tests"
# Check metadata: the key of the model's code and tests, and the run whose evaluation ran them.
TESTS_VERSION_KEY: Final = "strata/tests_version"
TESTS_RAN_IN_KEY: Final = "strata/tests_ran_in"
UNCHANGED_KEY: Final = "strata/unchanged_since"
# Dagster's check execution statuses of an evaluation that ended (by value: the enum is not public).
SUCCEEDED = "SUCCEEDED"
_COMPLETED = {SUCCEEDED, "FAILED"}
_PAGE = 100  # executions read at a time to find the last completed one (this run's are planned)
_PAGES = 20


def tested_models(project: Project) -> tuple[str, ...]:
    """Models that have at least one unit test, in dependency order."""
    tested = {test.model for test in project.tests}
    return tuple(name for name in project.order if name in tested)


def tests_version(code_version: str | None, tests: Iterable[ModelTest]) -> str:
    """The key of what a model's unit tests depend on: its code version and its tests' text."""
    digest = hashlib.sha256((code_version or "").encode())
    for test in tests:
        digest.update(repr(test).encode())
    return digest.hexdigest()[:16]


def unit_test_family(
    models: Mapping[dg.AssetKey, str], project: Project, code_versions: Mapping[str, str | None]
) -> CheckFamily:
    """The unit tests of `models` (asset key -> model): one in-memory database serves all the cases
    of a run. `code_versions`: each model's code version (its asset's)."""
    counts = {name: sum(test.model == name for test in project.tests) for name in models.values()}
    versions = {
        name: tests_version(code_versions.get(name), tuple(t for t in project.tests if t.model == name))
        for name in models.values()
    }
    specs = tuple(
        dg.AssetCheckSpec(
            UNIT_TEST_CHECK,
            asset=key,
            description=f"`{model}`'s {counted(counts[model], 'unit test')}: the model over fixture rows gives the expected rows.",
            blocking=False,
            metadata={c.MODEL_KEY: model},
        )
        for key, model in models.items()
    )

    def evaluate(
        context: dg.AssetCheckExecutionContext, strata: StrataResource, keys: Sequence[dg.AssetCheckKey]
    ) -> Iterator[dg.AssetCheckResult]:
        selected = {key.asset_key: models[key.asset_key] for key in keys}
        for key, model in list(selected.items()):
            unchanged = _unchanged(context.instance, key, versions[model])
            if unchanged is not None:
                del selected[key]
                yield unchanged
        if not selected:
            return
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
                metadata={
                    **_metadata(results, failed),
                    TESTS_VERSION_KEY: versions[model],
                    TESTS_RAN_IN_KEY: context.run.run_id,
                },
            )

    return CheckFamily(specs, evaluate)


def _unchanged(instance: dg.DagsterInstance, key: dg.AssetKey, version: str) -> dg.AssetCheckResult | None:
    """A passing result when the last completed evaluation passed for the same code and tests;
    None when the tests must run (never run, failed last, or the code or the tests changed)."""
    last = _last_completed(instance, dg.AssetCheckKey(key, UNIT_TEST_CHECK))
    if last is None or last.status.value != SUCCEEDED or last.event is None:
        return None
    event = last.event.dagster_event
    evaluation = event.event_specific_data if event is not None else None
    metadata = {
        name: getattr(value, "value", value) for name, value in getattr(evaluation, "metadata", {}).items()
    }
    if metadata.get(TESTS_VERSION_KEY) != version:
        return None
    ran_in = str(metadata.get(TESTS_RAN_IN_KEY) or last.run_id)
    passed = metadata.get("passed", 0)
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=UNIT_TEST_CHECK,
        passed=True,
        description=f"unchanged since run {ran_in[:8]}: the model's code and its "
        f"{counted(int(passed), 'unit test')} are those that passed there",
        metadata={
            "passed": passed,
            "failed": 0,
            UNCHANGED_KEY: ran_in,
            TESTS_VERSION_KEY: version,
            TESTS_RAN_IN_KEY: ran_in,
        },
    )


def _last_completed(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey) -> Any:
    """The check's latest execution that ended (passed or failed), or None."""
    cursor = None
    for _ in range(_PAGES):
        history = instance.event_log_storage.get_asset_check_execution_history(
            check_key, limit=_PAGE, cursor=cursor
        )
        for record in history:
            if record.status.value in _COMPLETED:
                return record
        if len(history) < _PAGE:
            return None
        cursor = history[-1].id
    return None


def _description(results: tuple[UnitTestResult, ...], failed: list[UnitTestResult]) -> str:
    if not failed:
        return f"{counted(len(results), 'unit test')} {'passes' if len(results) == 1 else 'pass'}"
    names = ", ".join(f"{result.name} ({result.location})" for result in failed)
    return f"{len(failed)} of {counted(len(results), 'unit test')} {'fails' if len(failed) == 1 else 'fail'}: {names}"


def _metadata(results: tuple[UnitTestResult, ...], failed: list[UnitTestResult]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"passed": len(results) - len(failed), "failed": len(failed)}
    if failed:
        metadata["failures"] = dg.MetadataValue.json([result.as_json() for result in failed])
    return metadata
