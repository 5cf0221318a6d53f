"""The reading of the partitioned models' stale partitions behind the stale sensor and the
`strata_stale_partitions` check (orchestration.stale_partitions_check).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContext

from strata_dagster.engine.explain import partition_ranges
from strata_dagster.engine.partition_staleness import StalePartitions, stale_partitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.resources import StrataResource
from strata_dagster.orchestration.sensor_observation import LOCK_WAIT_SECONDS

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


class InstanceLoading(LoadingContext):
    """The batch-loading scope Dagster's stale status is read through (one per tick or check run)."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._instance = instance
        self._loaders: dict = {}  # type: ignore[type-arg]

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def loaders(self) -> dict:  # type: ignore[type-arg]
        return self._loaders


def dagster_is_stale(instance: dg.DagsterInstance, asset_graph) -> Callable[[dg.AssetKey, str], bool]:  # type: ignore[no-untyped-def]
    """Dagster's own status of one asset partition: is it stale?"""
    resolver = CachingStaleStatusResolver(instance, asset_graph, InstanceLoading(instance))
    return lambda key, partition: resolver.get_status(key, partition) == StaleStatus.STALE
