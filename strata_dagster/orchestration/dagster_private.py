"""The only module of strata_dagster that uses Dagster's private API, imported only when its
features run (never when strata_dagster, its definitions or its component load, nor by a run that
builds models): reading Dagster's stale status.

- Stale status (what the UI shows as Stale, and why): Dagster computes it in
  `dagster._core.definitions.data_version.CachingStaleStatusResolver`; its public reading is the
  webserver's GraphQL (`assetNodes { staleStatus staleStatusByPartition }`), which needs a running
  webserver, which a sensor's tick or the automation daemon cannot count on. Used by the
  `strata_materialize_stale` sensor's tick and the `strata_automation` condition's evaluation.
  Waits for: a public stale-status reader (instance or asset-graph API).

A refused backfill's run ends Canceled through public calls only, and its backfill is left to
Dagster (no public API cancels one): nothing of a refusal is here.

Every name used here is checked by strata_dagster_tests/orchestration/test_dagster_public_api.py, which fails
loudly (naming the missing name) when a Dagster release moves one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
from dagster._core.definitions.data_version import (
    CachingStaleStatusResolver,
    StaleCauseCategory,
    StaleStatus,
)
from dagster._core.loader import LoadingContext

# What this module needs of Dagster's private API, for the test that checks it is all there.
PRIVATE_NAMES = {
    "dagster._core.definitions.data_version": (
        "CachingStaleStatusResolver",
        "StaleCauseCategory",
        "StaleStatus",
    ),
    "dagster._core.loader": ("LoadingContext",),
}
_CAUSES_SAMPLED = 20  # stale partitions per asset whose causes make the why


class _InstanceLoading(LoadingContext):
    """The batch-loading scope Dagster's stale status is read through (one per reader)."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._instance = instance
        self._loaders: dict = {}  # type: ignore[type-arg]  # values of Dagster's private loader types

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def loaders(self) -> dict:  # type: ignore[type-arg]  # values of Dagster's private loader types
        return self._loaders


class StaleStatusReader:
    """Dagster's stale status of the asset partitions of `asset_graph` (as the UI shows it), read
    through one cache: make one per tick or check evaluation."""

    def __init__(self, instance: dg.DagsterInstance, asset_graph: Any) -> None:
        self._resolver = CachingStaleStatusResolver(instance, asset_graph, _InstanceLoading(instance))

    def is_stale(self, key: dg.AssetKey, partition: str | None = None) -> bool:
        return self._resolver.get_status(key, partition) == StaleStatus.STALE

    def why(self, key: dg.AssetKey, stale: Sequence[str | None]) -> str:
        """Why `key` is stale, from the causes of (a sample of) its stale partitions, e.g.
        `orders has a new data version` or `has a new code version`."""
        found: dict[str, None] = {}
        for partition in stale[:_CAUSES_SAMPLED]:
            for cause in self._resolver.get_stale_causes(key, partition):
                if cause.children:  # an input's own cause reads best: `orders has a new data version`
                    found.update((f"{_label(child.key)} {child.reason}", None) for child in cause.children)
                elif cause.category == StaleCauseCategory.DATA and cause.dependency is not None:
                    found[f"{cause.reason}: {_label(cause.dependency)}"] = None
                else:
                    found[cause.reason] = None
        return ", ".join(found) or "stale"


def _label(key: Any) -> str:
    name = key.asset_key.to_user_string()
    return name if key.partition_key is None else f"{name}[{key.partition_key}]"


def stale_candidates(context: Any, is_due: Callable[[dg.DagsterInstance], bool]) -> dg.AutomationResult:  # type: ignore[type-arg]  # a result for assets, its key type left open
    """An automation condition's result (its `context` is Dagster's AutomationContext): the
    candidate partitions that are stale, or all candidates when `is_due` (a refresh period passed)."""
    view = context.asset_graph_view
    candidates = context.candidate_subset.expensively_compute_asset_partitions()
    if is_due(view.instance):
        return dg.AutomationResult(
            context, view.get_asset_subset_from_asset_partitions(context.key, candidates)
        )
    resolver = CachingStaleStatusResolver(
        view.instance,
        context.asset_graph,
        view,
        instance_queryer=view.get_inner_queryer_for_back_compat(),
    )
    stale = {
        partition
        for partition in candidates
        if resolver.get_status(partition.asset_key, partition.partition_key) == StaleStatus.STALE
    }
    return dg.AutomationResult(context, view.get_asset_subset_from_asset_partitions(context.key, stale))
