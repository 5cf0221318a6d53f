"""`strata_stale_partitions`: an asset check per partitioned model that names its stale partitions,
and the reading of them the stale sensor shares.

Dagster shows a partition's staleness only on that partition (the catalog, the asset's overview, the
lineage node and the partition bar say nothing about stale partitions). A check result is shown in
all of them: this one fails with severity WARN (a yellow badge) while some partitions are stale,
with their count and ranges in its metadata (`strata/stale_partitions`), and passes when none is.
The stale sensor reports the results each tick whose answer changed (no run needed), and the check
runs with every materialization of its model and from its *Execute* button.

Dagster's stale status costs tens of milliseconds per partition (event-log queries), so a first
reading of 3,650 daily partitions took about 45 s over many ticks. The engine answers the same
question from the per-partition input figures its last build recorded, in one grouped scan per
model (engine.partition_staleness), well under a second. The answer is also what the
`strata_stale_partitions` check shows; the sensor reports it when it changed.

The engine's answer is what its next build recomputes. That includes a partition whose last rebuild
gave its live rows again (the live state stays, with the figures of the build before), which
Dagster rightly sees as fresh: rebuilding it changes nothing. So a partial answer (some
partitions, not all) is confirmed with Dagster's own status of those partitions only (few, so a few
event-log queries); an answer of every partition (new code, another input changed) is Dagster's too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg

from strata_dagster.engine.explain import partition_ranges
from strata_dagster.engine.partition_staleness import StalePartitions, stale_partitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.provenance import is_stale_by_provenance
from strata_dagster.orchestration.checks.family import CheckFamily
from strata_dagster.orchestration.constants import LOCK_WAIT_SECONDS
from strata_dagster.orchestration.resources.strata import StrataResource

STALE_PARTITIONS_CHECK: Final = "strata_stale_partitions"
_RANGES_SHOWN = 50  # ranges in the description and metadata; the count is always whole


@dataclass(frozen=True)
class EngineStale:
    """What the engine told: the stale partitions of each model it answers for, and the checks'
    evaluations of every partitioned model."""

    stale: dict[dg.AssetKey, list[str | None]] = field(default_factory=dict)
    evaluations: dict[dg.AssetKey, dg.AssetCheckEvaluation] = field(default_factory=dict)

    def changed_since(self, reported: dict[str, str]) -> list[dg.AssetCheckEvaluation]:
        """The evaluations whose result differs from the one `reported` (asset -> digest) records;
        `reported` is updated with them."""
        events = []
        for key, evaluation in sorted(self.evaluations.items(), key=lambda item: str(item[0])):
            digest = _digest(evaluation)
            if reported.get(key.to_user_string()) != digest:
                reported[key.to_user_string()] = digest
                events.append(evaluation)
        return events


def read_engine_stale(
    strata: StrataResource,
    asset_graph,  # type: ignore[no-untyped-def]
    partitioned: Mapping[dg.AssetKey, tuple[str, str]],
    instance: dg.DagsterInstance,
    is_stale: Callable[[dg.AssetKey, str], bool],
    *,
    timeout: float | None = LOCK_WAIT_SECONDS,
) -> EngineStale:
    """The stale partitions of `partitioned` (asset -> (model, grain)) the engine tells, keyed as the
    assets' partitions are; `is_stale`: Dagster's status of one asset partition, which confirms a
    partial answer. Raises StrataError (E021 when a run holds the warehouse past `timeout`)."""
    if not partitioned:
        return EngineStale()
    found = stale_partitions(strata.project_path, strata.warehouse_path, strata.branch, timeout=timeout)
    stale: dict[dg.AssetKey, list[str | None]] = {}
    kept: dict[str, StalePartitions] = {}
    for key, (model, _) in partitioned.items():
        answer = found.get(model)
        if answer is None or not asset_graph.has(key):
            continue  # never built by partitions: Dagster's status (missing) applies
        partitions_def = asset_graph.get(key).partitions_def
        known = set(partitions_def.get_partition_keys(dynamic_partitions_store=instance))
        keys = tuple(
            partition
            for partition in answer.keys
            if partition in known and (answer.is_all or is_stale(key, partition))
        )
        stale[key] = list(keys)
        kept[model] = StalePartitions(model, keys, answer.reason, answer.is_all)
    return EngineStale(stale, stale_evaluations(partitioned, kept))


def _digest(evaluation: dg.AssetCheckEvaluation) -> str:
    text = json.dumps([evaluation.passed, evaluation.description], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
            ""
            if found is not None
            else " known by partition (never built, or its builds are whole: Dagster's own stale status applies)"
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


def dagster_is_stale(instance: dg.DagsterInstance, asset_graph) -> Callable[[dg.AssetKey, str], bool]:  # type: ignore[no-untyped-def]
    """Dagster's own status of one partition of a partitioned strata model: is it stale? Read from
    the provenance strata's own materialization of it records, as Dagster's staleness reads it
    (assets.provenance), through Dagster's public event records."""
    return lambda key, partition: is_stale_by_provenance(instance, asset_graph, key, partition)


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
