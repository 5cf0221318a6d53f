"""Which asset partitions are stale, and why, read through Dagster's public event records: the
provenance on each partition's latest materialization (code version, inputs' data versions and
event pointers, assets.provenance) against the code versions and the inputs' events now, as the UI's
Stale reads it. Used by the `strata_materialize_stale` sensor and the `strata_automation` condition."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from strata_dagster.orchestration.assets.provenance import is_stale_by_provenance, stale_causes

_CAUSES_SAMPLED = 20  # stale partitions per asset whose causes make the why


class StaleStatusReader:
    """The stale status of the asset partitions of `asset_graph`, one question at a time."""

    def __init__(self, instance: dg.DagsterInstance, asset_graph: Any) -> None:
        self._instance = instance
        self._graph = asset_graph

    def is_stale(self, key: dg.AssetKey, partition: str | None = None) -> bool:
        if not self._graph.has(key) or not self._graph.get(key).is_materializable:
            return False  # an observed asset is never stale
        if (self._graph.get(key).partitions_def is None) != (partition is None):
            return False  # as Dagster: a partitioned asset's status is its partitions'
        return is_stale_by_provenance(self._instance, self._graph, key, partition)

    def why(self, key: dg.AssetKey, stale: Sequence[str | None]) -> str:
        """Why `key` is stale, from the causes of (a sample of) its stale partitions, e.g.
        `orders has a new data version` or `has a new code version`."""
        found: dict[str, None] = {}
        for partition in stale[:_CAUSES_SAMPLED]:
            found.update((cause, None) for cause in stale_causes(self._instance, self._graph, key, partition))
        return ", ".join(found) or "stale"
