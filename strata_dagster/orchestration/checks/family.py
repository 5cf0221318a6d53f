"""`strata_checks`: one op for every strata asset check (pins, unit tests, stale partitions,
incremental equals full), each kind evaluated by its own family.

Why one op: Dagster runs an asset's checks in the run that materializes it, each op as a step of
its own (its start, outputs and success logged and written one by one, its resources and project
read again). One op runs the selected checks of all kinds in one step; the check keys, names and
results are the same.

A run over a range of partitions plans each check once per partition (Dagster plans every check of
such a run so, partitioned or not), and a check that reports one result for its asset leaves them
all "skipped". So each planned partition also gets the result as an evaluation of its own (the
stale-partitions family gives each partition its own answer first), before the asset's result,
which stays the latest one shown.

A StrataError in one family (a warehouse held too long, a project that no longer compiles) does
not keep the other families from reporting: they are evaluated, then the step fails with that
error, as the family's own op failed before (`failures.as_failure`).
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import dagster as dg

from strata_dagster.errors import StrataError
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.failures import as_failure
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource

Evaluate = Callable[
    [dg.AssetCheckExecutionContext, StrataResource, Sequence[dg.AssetCheckKey]], Iterator[dg.AssetCheckResult]
]


@dataclass(frozen=True)
class CheckFamily:
    """Checks of one kind: their specs, and how the selected ones (keys of these specs, in a stable
    order) are evaluated in a check op."""

    specs: tuple[dg.AssetCheckSpec, ...]
    evaluate: Evaluate


def strata_checks_op(families: Sequence[CheckFamily], names: ProjectNames) -> list[dg.AssetChecksDefinition]:
    """The op evaluating the families' checks (none when no family has a check)."""
    families = [family for family in families if family.specs]
    if not families:
        return []
    owner = {spec.key: index for index, family in enumerate(families) for spec in family.specs}

    @dg.multi_asset_check(
        name=names.checks_op,
        specs=[spec for family in families for spec in family.specs],
        can_subset=True,
        required_resource_keys={names.resource_key},
        pool=c.DUCKDB_POOL,
        description="strata's checks on its models: pins, unit tests, stale partitions, incremental equals full.",
    )
    def _checks(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        strata: StrataResource = getattr(context.resources, names.resource_key)
        selected = sorted(context.selected_asset_check_keys, key=lambda key: key.to_user_string())
        failed: StrataError | None = None
        for index, family in enumerate(families):
            keys = [key for key in selected if owner[key] == index]
            if not keys:
                continue
            try:
                for result in family.evaluate(context, strata, keys):
                    for event in _for_planned_partitions(context, result):
                        # log_event handles check evaluations; its UserEvent alias does not list them yet
                        context.op_execution_context.log_event(event)  # type: ignore[arg-type]  # see above
                    yield result
            except StrataError as error:
                failed = failed or error
        if failed is not None:
            raise as_failure(failed)

    return [_checks]


def planned_partitions(context: dg.AssetCheckExecutionContext, check_key: dg.AssetCheckKey) -> list[str]:
    """The partitions this run planned `check_key` for and that have no evaluation yet."""
    node = context.job_def.asset_layer.asset_graph.get(check_key.asset_key)
    partitions_def = node.partitions_def if node is not None else None
    if partitions_def is None or not any(tag in context.run.tags for tag in _PARTITION_TAGS):
        return []
    count = len(partitions_def.get_partition_keys(dynamic_partitions_store=context.instance))
    history = context.instance.event_log_storage.get_asset_check_execution_history(
        check_key, limit=2 * count + 100
    )
    run_id = context.run.run_id
    return sorted(
        record.partition
        for record in history
        if record.run_id == run_id and record.partition is not None and record.status.value == "PLANNED"
    )


_PARTITION_TAGS = ("dagster/partition", c.RANGE_START_TAG)  # a run of one partition, of a range


def _for_planned_partitions(
    context: dg.AssetCheckExecutionContext, result: dg.AssetCheckResult
) -> list[dg.AssetCheckEvaluation]:
    if result.asset_key is None:  # a check result names its asset when it has several
        return []
    check_key = dg.AssetCheckKey(dg.AssetKey.from_coercible(result.asset_key), str(result.check_name))
    return [
        dg.AssetCheckEvaluation(
            asset_key=check_key.asset_key,
            check_name=check_key.name,
            passed=result.passed,
            severity=result.severity,
            description=f"the whole asset: {result.description}" if result.description else None,
            partition=partition,
        )
        for partition in planned_partitions(context, check_key)
    ]
