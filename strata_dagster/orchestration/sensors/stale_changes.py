"""Which asset partitions' stale status may have changed since a tick: Dagster's status of a
partition depends only on its own latest event (its provenance: input data versions and code
version) and on the current data versions of the partitions it reads directly. So after a tick,
only the partitions that got an event and their direct children need their status again; every
other partition keeps the status the tick found. This keeps a tick's cost with what happened, not
with the number of partitions (3,650 days: one status costs about 40 ms of event-log queries).
"""

from __future__ import annotations

from typing import NamedTuple

import dagster as dg

_PAGE = 5_000


class AssetPartition(NamedTuple):
    """One partition of an asset (partition_key None: an unpartitioned asset)."""

    asset_key: dg.AssetKey
    partition_key: str | None


def touched_since(instance: dg.DagsterInstance, asset_graph, since: int) -> set[AssetPartition]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """The asset partitions materialized or observed after event storage id `since`."""
    touched: set[AssetPartition] = set()
    for key in asset_graph.get_all_asset_keys():
        for fetch in (instance.fetch_materializations, instance.fetch_observations):
            cursor = None
            while True:
                page = fetch(
                    dg.AssetRecordsFilter(asset_key=key, after_storage_id=since), limit=_PAGE, cursor=cursor
                )
                touched.update(AssetPartition(key, record.partition_key) for record in page.records)
                if not page.has_more:
                    break
                cursor = page.cursor
    return touched


def may_have_changed(asset_graph, touched: set[AssetPartition]) -> set[AssetPartition]:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """`touched` and every partition that reads one of them directly."""
    found = set(touched)
    for item in touched:
        found |= {
            AssetPartition(child.asset_key, child.partition_key)
            for child in asset_graph.get_children_partitions(item.asset_key, item.partition_key)
        }
    return found
