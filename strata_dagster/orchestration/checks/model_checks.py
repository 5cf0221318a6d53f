"""Asset checks on strata models, a verification job and its schedule.

- `strata_unique` / `strata_contract` on every model with that pin (SQL models and Python models
  alike): measured on the live view, read-only, in the runs that materialize the model (Dagster
  runs an asset's checks with it; all of a run's pins in one session, as opening the warehouse
  costs more than measuring a pin) and whenever launched alone. Not blocking: the engine has already
  refused to publish a snapshot that breaks a pin; a failure here means the warehouse changed
  behind its back.
- `column_schema_change` (Dagster's `build_column_schema_change_checks`) on every model with a
  `contract`, run with each materialization.
- `strata_incremental_equals_full` on every incremental or partitioned SQL model: `verify` (a full
  rebuild in scratch space, compared with the live view). It is expensive, so it runs in checks-only
  runs (the `strata_verify` job and its schedule, or a check's *Execute* button) and skips itself in
  a run that materializes its model, unless that run carries the tag `strata/verify: always`.
- `strata_unit_tests` on every model with `test` blocks: cheap (in-memory DuckDB), it runs with
  each materialization of the model and alone (unit_test_checks.py).

Each kind is a `CheckFamily`; the definitions evaluate them all in one op (checks.family).
"""

from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg

from strata_dagster.engine.commands.checks import (
    LivePins,
    Pins,
    check_live_pins,
    describe_difference,
    is_verifiable,
    model_pins,
    verification_metadata,
    verify_published,
)
from strata_dagster.language.definition import Project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.family import CheckFamily
from strata_dagster.orchestration.checks.source_checks import source_assumption_checks, source_ledger_checks
from strata_dagster.orchestration.checks.unit_tests import tested_models, unit_test_family
from strata_dagster.orchestration.io.frames import parse_contract, raw
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

UNIQUE_CHECK: Final = "strata_unique"
CONTRACT_CHECK: Final = "strata_contract"
EQUIVALENCE_CHECK: Final = "strata_incremental_equals_full"
SCHEMA_CHANGE_CHECK: Final = "column_schema_change"  # the name build_column_schema_change_checks gives
DEFAULT_VERIFICATION_SCHEDULE: Final = "0 3 * * *"
# Run tag: `always` makes the equivalence check verify even in a run that materializes its model.
VERIFY_TAG: Final = "strata/verify"
VERIFY_ALWAYS: Final = "always"


@dataclass(frozen=True)
class StrataChecks:
    asset_checks: list[dg.AssetChecksDefinition] = field(default_factory=list)  # ops of their own
    families: list[CheckFamily] = field(default_factory=list)  # evaluated in the `strata_checks` op
    jobs: list[Any] = field(default_factory=list)
    schedules: list[dg.ScheduleDefinition] = field(default_factory=list)


def build_checks(
    project: Project,
    nodes: Mapping[str, StrataAssetProps],
    translator: StrataDagsterTranslator,
    python_assets: Sequence[dg.AssetsDefinition] = (),
    *,
    names: ProjectNames,
    executor: dg.ExecutorDefinition,
    verification_schedule: str | None = DEFAULT_VERIFICATION_SCHEDULE,
    schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> StrataChecks:
    """The pin checks of every model, the equivalence checks of the verifiable ones, the
    `strata_verify` job running only those, and its schedule (none when `verification_schedule` is
    None)."""
    pins = {
        translator.get_asset_key(nodes[name]): (name, model_pins(project, name)) for name in project.order
    }
    pins.update(python_model_pins(python_assets))
    families = [pin_family(pins)]
    tested = {translator.get_asset_key(nodes[name]): name for name in tested_models(project)}
    if tested:
        code_versions = {name: nodes[name].code_version for name in tested.values()}
        families.append(unit_test_family(tested, project, code_versions))
    checks: list[dg.AssetChecksDefinition] = []
    # A model with a contract: Dagster's own check that its columns and types did not change
    # between its last two materializations (each carries the published `dagster/column_schema`).
    contracted = [key for key, (_, found) in pins.items() if found.contract]
    if contracted:
        checks.extend(dg.build_column_schema_change_checks(assets=contracted))
    verifiable = {
        translator.get_asset_key(nodes[name]): name for name in project.order if is_verifiable(project, name)
    }
    ledgers = {
        translator.get_asset_key(nodes[name]): name
        for name, source in project.sources.items()
        if source.is_business_versioned and name in nodes
    }
    if ledgers:
        checks.append(source_assumption_checks(ledgers, names))
    if not verifiable and not ledgers:
        return StrataChecks(checks, families)
    equivalence = equivalence_family(verifiable, names)
    families.append(equivalence)
    deep: list[dg.AssetChecksDefinition | dg.AssetCheckKey] = [spec.key for spec in equivalence.specs]
    if ledgers:
        ledger_checks = source_ledger_checks(ledgers, names)
        checks.append(ledger_checks)
        deep.append(ledger_checks)
    job = dg.define_asset_job(
        names.verify_job,
        selection=dg.AssetSelection.checks(*deep),
        executor_def=executor,
        description=(
            "Compare every incremental or partitioned strata model's live view with a full rebuild "
            "(scratch space, rolled back): the strata_incremental_equals_full checks only."
        ),
    )
    schedules = []
    if verification_schedule is not None:
        schedules.append(
            dg.ScheduleDefinition(
                name=names.verify_schedule,
                job=job,
                cron_schedule=verification_schedule,
                default_status=schedule_status,
                description="Periodic verification: incremental models against full rebuilds.",
            )
        )
    return StrataChecks(checks, families, [job], schedules)


def python_model_pins(assets: Sequence[dg.AssetsDefinition]) -> dict[dg.AssetKey, tuple[str, Pins]]:
    """The pins of Python models (`strata_python_model`), read as the IO manager enforces them."""
    pins = {}
    for assets_def in assets:
        for key in assets_def.keys:
            metadata = assets_def.metadata_by_key.get(key, {})
            if metadata.get(c.MODEL_KEY):
                unique = tuple(raw(metadata.get(c.UNIQUE_KEY)) or ())
                contract = parse_contract(raw(metadata.get(c.CONTRACT_KEY)))
                pins[key] = (str(raw(metadata[c.MODEL_KEY])), Pins(unique, contract))
    return pins


def pin_family(models: Mapping[dg.AssetKey, tuple[str, Pins]]) -> CheckFamily:
    """`strata_unique` and `strata_contract` on the live view of each model (asset key -> model and
    its pins) that has them, all of a run's measured in one read-only session."""
    specs: dict[dg.AssetCheckKey, dg.AssetCheckSpec] = {}
    for key, (model, pins) in models.items():
        if pins.unique:
            spec = dg.AssetCheckSpec(
                UNIQUE_CHECK,
                asset=key,
                description=f"No two rows of the live view share a value of ({', '.join(pins.unique)}).",
                metadata={c.MODEL_KEY: model, "unique_columns": list(pins.unique)},
            )
            specs[spec.key] = spec
        if pins.contract:
            spec = dg.AssetCheckSpec(
                CONTRACT_CHECK,
                asset=key,
                description="The live view has the contract's columns and types, and no NULL in a `not null` column.",
                metadata={c.MODEL_KEY: model},
            )
            specs[spec.key] = spec

    def evaluate(
        context: dg.AssetCheckExecutionContext, strata: StrataResource, selected: Sequence[dg.AssetCheckKey]
    ) -> Iterator[dg.AssetCheckResult]:
        wanted = {models[key.asset_key][0]: models[key.asset_key][1] for key in selected}
        live = check_live_pins(strata.warehouse_path, wanted, strata.branch)
        for key in selected:
            yield _pin_result(key, live[models[key.asset_key][0]], strata.branch)

    return CheckFamily(tuple(specs.values()), evaluate)


def _pin_result(key: dg.AssetCheckKey, live: LivePins, branch: str) -> dg.AssetCheckResult:
    if not live.is_published:
        return _not_published(key, live.model, branch)
    if live.unreadable is not None:
        return dg.AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=False,
            description=f"the live view {live.relation} cannot be read: {live.unreadable}",
            metadata={"relation": live.relation},
        )
    passed, description, metadata = (
        _unique_result(live) if key.name == UNIQUE_CHECK else _contract_result(live)
    )
    return dg.AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=passed,
        description=description,
        metadata=metadata,
    )


def _unique_result(live: LivePins) -> tuple[bool, str, dict[str, Any]]:
    assert live.duplicates is not None
    found = live.duplicates
    if found.is_unique:
        description = f"{live.rows:,} rows, no duplicate key"
    else:
        description = (
            f"{found.key_values:,} key value(s) of ({', '.join(found.columns)}) held by "
            f"{found.rows:,} rows (up to {found.max_copies} copies)"
        )
    return found.is_unique, description, live.unique_metadata()


def _contract_result(live: LivePins) -> tuple[bool, str, dict[str, Any]]:
    problems = live.contract_problems or ()
    description = "; ".join(problem.message for problem in problems) or (
        f"{len(live.pins.contract)} column(s) as the contract says"
    )
    return not problems, description, live.contract_metadata()


def equivalence_family(models: Mapping[dg.AssetKey, str], names: ProjectNames) -> CheckFamily:
    """The equivalence checks of `models` (asset key -> model): models verified together share
    their upstream rebuilds, and one warehouse session serves them all."""
    specs = tuple(
        dg.AssetCheckSpec(
            EQUIVALENCE_CHECK,
            asset=key,
            description=(
                f"`{model}`'s live rows equal a full rebuild from the sources as they are now: row "
                "counts, row-hash multisets, numeric totals, per partition."
            ),
            blocking=False,
            metadata={c.MODEL_KEY: model},
        )
        for key, model in models.items()
    )

    def evaluate(
        context: dg.AssetCheckExecutionContext,
        strata: StrataResource,
        selected_keys: Sequence[dg.AssetCheckKey],
    ) -> Iterator[dg.AssetCheckResult]:
        selected = {key.asset_key: models[key.asset_key] for key in selected_keys}
        building: AbstractSet[dg.AssetKey] = frozenset()
        if context.run.tags.get(VERIFY_TAG) != VERIFY_ALWAYS:
            building = _planned_assets(context.instance, context.run.run_id)
        skipped = sorted(model for key, model in selected.items() if key in building)
        if skipped:
            # No result: Dagster shows the check as skipped in this run.
            context.log.info(
                f"not verifying {', '.join(skipped)} in the run that materializes them (a full "
                f"rebuild each time): run the `{names.verify_job}` job, or tag the run {VERIFY_TAG}={VERIFY_ALWAYS}"
            )
        wanted = {key: model for key, model in selected.items() if key not in building}
        if not wanted:
            return
        verification = verify_published(
            strata.project_path, strata.warehouse_path, wanted.values(), strata.branch
        )
        for key, model in wanted.items():
            if model in verification.unpublished:
                yield _not_published(dg.AssetCheckKey(key, EQUIVALENCE_CHECK), model, strata.branch)
                continue
            assert verification.report is not None
            result = verification.report.model(model)
            yield dg.AssetCheckResult(
                asset_key=key,
                check_name=EQUIVALENCE_CHECK,
                passed=result.is_equal,
                description=describe_difference(result),
                metadata={**verification_metadata(result), "branch": strata.branch},
            )

    return CheckFamily(specs, evaluate)


def _planned_assets(instance: dg.DagsterInstance, run_id: str) -> set[dg.AssetKey]:
    """The assets the run plans to materialize (its planned-materialization events)."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    ).records
    planned: set[dg.AssetKey] = set()
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None:  # a planned materialization's record is a Dagster event: never
            raise AttributeError("'NoneType' object has no attribute 'asset_key'")
        if event.asset_key is not None:
            planned.add(event.asset_key)
    return planned


def _not_published(key: dg.AssetCheckKey, model: str, branch: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"`{model}` is not published on branch `{branch}` yet: materialize it first",
        metadata={"is_published": False},
    )
