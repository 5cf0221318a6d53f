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

from collections.abc import Iterator, Mapping, Sequence

import dagster as dg

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.check_op import CheckFamily
from strata_dagster.orchestration.resources import StrataResource
from strata_dagster.orchestration.stale_partitions_reading import (
    STALE_PARTITIONS_CHECK,
    dagster_is_stale,
    read_engine_stale,
)


def stale_partitions_family(models: Mapping[dg.AssetKey, tuple[str, str]]) -> CheckFamily:
    """The checks of `models` (asset key -> (model, partition grain)): one read-only warehouse
    session answers them all."""
    specs = tuple(
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
    )

    def evaluate(
        context: dg.AssetCheckExecutionContext, strata: StrataResource, keys: Sequence[dg.AssetCheckKey]
    ) -> Iterator[dg.AssetCheckResult]:
        # The job's asset graph holds every asset of the definitions (the upstream ones its staleness reads).
        graph = context.job_def.asset_layer.asset_graph
        is_stale = dagster_is_stale(context.instance, graph)
        told = read_engine_stale(strata, graph, models, context.instance, is_stale, timeout=None)
        for check_key in keys:
            evaluation = told.evaluations[check_key.asset_key]
            yield dg.AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=STALE_PARTITIONS_CHECK,
                passed=evaluation.passed,
                severity=evaluation.severity,
                description=evaluation.description,
                metadata=evaluation.metadata,
            )

    return CheckFamily(specs, evaluate)
