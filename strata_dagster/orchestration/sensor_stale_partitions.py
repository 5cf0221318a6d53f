"""The stale sensor's reading of the partitioned models' stale partitions, from the engine.

Dagster's stale status costs tens of milliseconds per partition (event-log queries), so a first
reading of 3,650 daily partitions took about 45 s over many ticks. The engine answers the same
question from the per-partition input figures its last build recorded, in one grouped scan per
model (engine.partition_staleness), well under a second. The answer is also what the
`strata_stale_partitions` check shows; the sensor reports it when it changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import dagster as dg

from strata_dagster.engine.partition_staleness import StalePartitions, stale_partitions
from strata_dagster.orchestration.resources import StrataResource
from strata_dagster.orchestration.sensor_observation import LOCK_WAIT_SECONDS
from strata_dagster.orchestration.stale_partitions_check import stale_evaluations


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
) -> EngineStale:
    """The engine's stale partitions of `partitioned` (asset -> (model, grain)), keyed as the
    assets' partitions are. Raises StrataError (E021 when a run holds the warehouse)."""
    if not partitioned:
        return EngineStale()
    found = stale_partitions(
        strata.project_path, strata.warehouse_path, strata.branch, timeout=LOCK_WAIT_SECONDS
    )
    stale: dict[dg.AssetKey, list[str | None]] = {}
    kept: dict[str, StalePartitions] = {}
    for key, (model, _) in partitioned.items():
        answer = found.get(model)
        if answer is None or not asset_graph.has(key):
            continue  # never built by partitions: Dagster's status (missing) applies
        partitions_def = asset_graph.get(key).partitions_def
        known = set(partitions_def.get_partition_keys(dynamic_partitions_store=instance))
        keys = tuple(partition for partition in answer.keys if partition in known)
        stale[key] = list(keys)
        kept[model] = StalePartitions(model, keys, answer.reason, answer.is_all)
    return EngineStale(stale, stale_evaluations(partitioned, kept))


def _digest(evaluation: dg.AssetCheckEvaluation) -> str:
    text = json.dumps([evaluation.passed, evaluation.description], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
