"""`strata_stale_partitions`: an asset check per partitioned model that names its stale partitions.

Dagster shows a partition's staleness only on that partition (the catalog, the asset's overview, the
lineage node and the partition bar say nothing about stale partitions). A check result is shown in
all of them: this one fails with severity WARN (a yellow badge) while some partitions are stale,
with their count and ranges in its metadata (`strata/stale_partitions`), and passes when none is.

The engine answers (engine.partition_staleness: its own per-partition input figures, one grouped
scan per model), so a reading of 3,650 partitions costs a scan, not 3,650 event-log queries. The
stale sensor reports the results each tick whose answer changed (no run needed), and the check runs
with every materialization of its model and from its *Execute* button.
"""

from collections.abc import Iterator, Mapping
from typing import Any, Final

import dagster as dg

from strata_dagster.engine.explain import partition_ranges
from strata_dagster.engine.partition_staleness import StalePartitions, stale_partitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.resources import StrataResource

STALE_PARTITIONS_CHECK: Final = "strata_stale_partitions"
_RANGES_SHOWN = 50  # ranges in the description and metadata; the count is always whole


def stale_partitions_check(models: Mapping[dg.AssetKey, tuple[str, str]]) -> dg.AssetChecksDefinition:
    """One op for the checks of `models` (asset key -> (model, partition grain)): one read-only
    warehouse session answers them all."""
    specs = [
        dg.AssetCheckSpec(
            STALE_PARTITIONS_CHECK,
            asset=key,
            description=(
                f"No partition of `{model}` is stale: every partition was built from its input's rows as "
                "they are now. Fails (WARN) with the stale partitions' count and ranges."
            ),
            blocking=False,
            metadata={c.MODEL_KEY: model},
        )
        for key, (model, _) in models.items()
    ]

    @dg.multi_asset_check(
        name=STALE_PARTITIONS_CHECK,
        specs=specs,
        can_subset=True,
        required_resource_keys={c.STRATA_RESOURCE_KEY},
        pool=c.DUCKDB_POOL,
        description="The stale partitions of strata's partitioned models, as the engine would rebuild them.",
    )
    def _stale(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        strata: StrataResource = getattr(context.resources, c.STRATA_RESOURCE_KEY)
        found = stale_partitions(strata.project_path, strata.warehouse_path, strata.branch)
        for check_key in context.selected_asset_check_keys:
            model, grain = models[check_key.asset_key]
            yield dg.AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=STALE_PARTITIONS_CHECK,
                **stale_result(model, grain, found.get(model)),
            )

    return _stale


def stale_result(model: str, grain: str, found: StalePartitions | None) -> dict[str, Any]:
    """passed, severity, description and metadata of a model's check, from the engine's reading
    (None: not built by partitions yet, so nothing is stale by partition)."""
    keys = () if found is None else found.keys
    ranges = partition_ranges(keys, grain)
    shown = ", ".join(ranges[:_RANGES_SHOWN]) + (" ..." if len(ranges) > _RANGES_SHOWN else "")
    metadata: dict[str, Any] = {
        c.STALE_PARTITIONS_TAG: len(keys),
        "stale_partition_ranges": list(ranges[:_RANGES_SHOWN]),
        c.MODEL_KEY: model,
    }
    if not keys:
        description = f"no stale partition of `{model}`" + (
            "" if found is not None else " (not built by partitions yet)"
        )
        return {"passed": True, "description": description, "metadata": metadata}
    assert found is not None
    metadata["reason"] = found.reason
    return {
        "passed": False,
        "severity": dg.AssetCheckSeverity.WARN,
        "description": f"{len(keys)} stale partition(s) of `{model}` ({found.reason}): {shown}",
        "metadata": metadata,
    }


def stale_evaluations(
    models: Mapping[dg.AssetKey, tuple[str, str]], found: Mapping[str, StalePartitions]
) -> dict[dg.AssetKey, dg.AssetCheckEvaluation]:
    """The check's evaluation for every model of `models`, as a sensor reports it."""
    evaluations = {}
    for key, (model, grain) in models.items():
        fields = stale_result(model, grain, found.get(model))
        evaluations[key] = dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=STALE_PARTITIONS_CHECK,
            passed=fields["passed"],
            severity=fields.get("severity", dg.AssetCheckSeverity.ERROR),
            description=fields["description"],
            metadata=fields["metadata"],
        )
    return evaluations
