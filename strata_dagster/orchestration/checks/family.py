"""`strata_checks`: one op for every strata asset check (pins, unit tests, stale partitions,
incremental equals full), each kind evaluated by its own family.

Why one op: Dagster runs an asset's checks in the run that materializes it, each op as a step of
its own (its start, outputs and success logged and written one by one, its resources and project
read again). One op runs the selected checks of all kinds in one step; the check keys, names and
results are the same.

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
                yield from family.evaluate(context, strata, keys)
            except StrataError as error:
                failed = failed or error
        if failed is not None:
            raise as_failure(failed)

    return [_checks]
