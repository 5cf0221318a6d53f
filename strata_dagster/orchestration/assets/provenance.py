"""The versions on the materializations strata's model steps log themselves, read from Dagster's
public event records.

A ranged run of a partitioned model gives each partition its own data version (its content), which
an op's output cannot: Dagster gives every partition of an output one version. So a model's step
logs one `AssetMaterialization` per partition (one for an unpartitioned model), tagged as Dagster
tags its own: the code version, the data version, and for each input the data version and the
storage id of the latest event it was read from (what Dagster's staleness compares). The inputs'
events are read when the model's events are logged, after the step's own events for them (the
sources it found changed, the companions it refreshed, the upstream models built in the same step).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from strata_dagster.orchestration import constants as c

# Dagster's data version of an input it has no event of (a source never observed).
INITIAL_DATA_VERSION = "INITIAL"
# Dagster's staleness leaves out an input of this many partitions or more of one partition (or of
# an unpartitioned asset), for speed: so does the reading below.
_MOST_INPUT_PARTITIONS = 100


@dataclass(frozen=True)
class ModelInput:
    """An asset a model reads: a source or companion (observed) or a model (materialized)."""

    key: dg.AssetKey
    is_observed: bool


def latest_record(instance: dg.DagsterInstance, item: ModelInput) -> dg.EventLogRecord | None:
    """The latest observation of an observed input, or materialization of a materialized one (of
    any partition): the event Dagster reads the input's current data version from."""
    fetch = instance.fetch_observations if item.is_observed else instance.fetch_materializations
    records = fetch(dg.AssetRecordsFilter(asset_key=item.key), limit=1).records
    return records[0] if records else None


def recorded_data_version(record: dg.EventLogRecord | None) -> str | None:
    """The data version an event carries (None: no event, or one without a version)."""
    if record is None:
        return None
    entry = record.event_log_entry
    event = entry.asset_materialization or entry.asset_observation
    return (event.tags or {}).get(c.DATA_VERSION_TAG) if event is not None else None


def input_tags(instance: dg.DagsterInstance, inputs: Iterable[ModelInput]) -> dict[str, str]:
    """Each input's data version and event pointer, as Dagster's own materializations record them."""
    tags: dict[str, str] = {}
    for item in inputs:
        record = latest_record(instance, item)
        name = item.key.to_user_string()
        tags[f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/{name}"] = (
            recorded_data_version(record) or INITIAL_DATA_VERSION
        )
        tags[f"{c.INPUT_EVENT_POINTER_TAG_PREFIX}/{name}"] = (
            str(record.storage_id) if record is not None else c.NULL_EVENT_POINTER
        )
    return tags


def materialization_tags(
    provenance: Mapping[str, str], data_version: str, code_version: str, run_tags: Mapping[str, str]
) -> dict[str, str]:
    """The tags of one materialization: its versions, the inputs' `provenance`, and the Dagster
    backfill of the run (as Dagster tags its own materializations in a backfill)."""
    tags = {
        **provenance,
        c.CODE_VERSION_TAG: code_version,
        c.DATA_VERSION_TAG: data_version,
        c.DATA_VERSION_IS_USER_PROVIDED_TAG: "true",
    }
    backfill = run_tags.get(c.BACKFILL_ID_TAG)
    if backfill:
        tags[c.BACKFILL_ID_TAG] = backfill
    return tags


def is_stale_by_provenance(
    instance: dg.DagsterInstance, asset_graph: Any, key: dg.AssetKey, partition: str | None
) -> bool:
    """Whether Dagster shows `partition` of `key` stale (see `stale_causes`; stops at the first cause)."""
    return next(stale_causes(instance, asset_graph, key, partition), None) is not None


def stale_causes(
    instance: dg.DagsterInstance, asset_graph: Any, key: dg.AssetKey, partition: str | None
) -> Iterator[str]:
    """Why `partition` of `key` (None: an unpartitioned asset) is stale, read as Dagster's
    staleness reads it from the provenance on its latest materialization (strata's own, above, or
    Dagster's, which carries the same tags): another code version, an input it did not read, or an
    input (partition) with a newer data version than the one before the recorded event pointer.
    None when fresh or never materialized (missing, not stale)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=None if partition is None else [partition]),
        limit=1,
    ).records
    if not records:
        return
    materialization = records[0].event_log_entry.asset_materialization
    tags = (materialization.tags if materialization is not None else None) or {}
    code_version = asset_graph.get(key).code_version
    if code_version and tags.get(c.CODE_VERSION_TAG) != code_version:
        yield "has a new code version"
    parents: dict[dg.AssetKey, list[str | None]] = {}
    # A dynamic partitions definition reads its keys from the instance (a sensor's tick has none set).
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        for parent in asset_graph.get_parents_partitions(key, partition).parent_partitions:
            parents.setdefault(parent.asset_key, []).append(parent.partition_key)
    names = {parent_key.to_user_string() for parent_key in asset_graph.get(key).parent_keys}
    for tag in sorted(tags):
        if tag.startswith(f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/"):
            name = tag.removeprefix(f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/")
            if name not in names:
                yield f"removed dependency on {name}"
    for parent_key, partitions in parents.items():
        if partitions != [None] and _is_left_out(asset_graph, key, parent_key, partitions):
            continue
        name = parent_key.to_user_string()
        pointer = tags.get(f"{c.INPUT_EVENT_POINTER_TAG_PREFIX}/{name}")
        if pointer is None:
            yield f"has a new dependency on {name}"
            continue
        item = ModelInput(parent_key, is_observed=not asset_graph.get(parent_key).is_materializable)
        if partitions == [None]:
            recorded = tags.get(f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/{name}")
            if (recorded_data_version(latest_record(instance, item)) or INITIAL_DATA_VERSION) != recorded:
                yield f"{name} has a new data version"
            continue
        cursor = None if pointer == c.NULL_EVENT_POINTER else int(pointer)
        updated = next(
            (part for part in partitions if part is not None and _is_updated(instance, item, part, cursor)),
            None,
        )
        if updated is not None:
            yield f"{name}[{updated}] has a new data version"


def _is_left_out(
    asset_graph: Any, key: dg.AssetKey, parent_key: dg.AssetKey, partitions: list[str | None]
) -> bool:
    """As Dagster's staleness: a partitioned input counts only through a few partitions, and not
    when all of a time-window input is read."""
    if len(partitions) >= _MOST_INPUT_PARTITIONS:
        return True
    return isinstance(
        asset_graph.get(parent_key).partitions_def, dg.TimeWindowPartitionsDefinition
    ) and isinstance(asset_graph.get_partition_mapping(key, parent_key), dg.AllPartitionMapping)


def _is_updated(instance: dg.DagsterInstance, item: ModelInput, partition: str, cursor: int | None) -> bool:
    """An event of `item`'s `partition` after `cursor` whose data version differs from the latest
    one at or before it. Without a cursor (the input had no event when read), never: Dagster then
    compares the latest event with itself."""
    if cursor is None:
        return False
    fetch = instance.fetch_observations if item.is_observed else instance.fetch_materializations
    after = fetch(
        dg.AssetRecordsFilter(asset_key=item.key, asset_partitions=[partition], after_storage_id=cursor),
        limit=1,
    ).records
    if not after:
        return False
    before = fetch(
        dg.AssetRecordsFilter(asset_key=item.key, asset_partitions=[partition], before_storage_id=cursor + 1),
        limit=1,
    ).records
    return recorded_data_version(after[0]) != recorded_data_version(before[0] if before else None)
