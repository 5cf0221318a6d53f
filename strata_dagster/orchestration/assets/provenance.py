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

from collections.abc import Iterable, Iterator, Mapping, Sequence
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


def stale_by_provenance(
    instance: dg.DagsterInstance, asset_graph: Any, key: dg.AssetKey, partitions: Sequence[str]
) -> set[str]:
    """Those of `partitions` of `key` that Dagster shows stale, as `is_stale_by_provenance` says of
    each, read for all of them at once: the latest materialization of every partition in one query
    (a few, by storage ids), each partitioned input's latest event per partition in one, and an
    input partition's events around the recorded pointer only where one came after it."""
    latest = instance.event_log_storage.get_latest_storage_id_by_partition(
        key, dg.DagsterEventType.ASSET_MATERIALIZATION, set(partitions)
    )
    ids = sorted(latest.values())
    records: dict[str, dg.EventLogRecord] = {}
    for start in range(0, len(ids), _RECORDS_A_QUERY):
        chunk = ids[start : start + _RECORDS_A_QUERY]
        found = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk)
        ).records
        records.update((record.partition_key, record) for record in found if record.partition_key is not None)
    inputs = _InputEvents(instance, batched=True)
    return {
        partition
        for partition, record in records.items()
        if next(_causes(instance, asset_graph, key, partition, record, inputs), None) is not None
    }


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
    if records:
        yield from _causes(instance, asset_graph, key, partition, records[0], _InputEvents(instance))


_RECORDS_A_QUERY = 500  # storage ids asked for in one query


class _InputEvents:
    """What the staleness of a model's partitions reads of its inputs' events, each read once. When
    `batched` (many partitions are read), a partitioned input's latest event per partition is read
    in one query, and its partition's events around a pointer only when one came after it."""

    def __init__(self, instance: dg.DagsterInstance, *, batched: bool = False) -> None:
        self.instance, self.batched = instance, batched
        self._versions: dict[ModelInput, str] = {}
        self._latest_by_partition: dict[ModelInput, Mapping[str, int]] = {}

    def version(self, item: ModelInput) -> str:
        """An unpartitioned input's data version now."""
        if item not in self._versions:
            self._versions[item] = (
                recorded_data_version(latest_record(self.instance, item)) or INITIAL_DATA_VERSION
            )
        return self._versions[item]

    def is_updated(self, item: ModelInput, partition: str, cursor: int | None) -> bool:
        if cursor is None:
            return False
        if self.batched:
            if item not in self._latest_by_partition:
                kind = (
                    dg.DagsterEventType.ASSET_OBSERVATION
                    if item.is_observed
                    else dg.DagsterEventType.ASSET_MATERIALIZATION
                )
                self._latest_by_partition[item] = (
                    self.instance.event_log_storage.get_latest_storage_id_by_partition(item.key, kind)
                )
            if self._latest_by_partition[item].get(partition, cursor) <= cursor:
                return False  # no event of that partition after the pointer
        return _is_updated(self.instance, item, partition, cursor)


def _causes(
    instance: dg.DagsterInstance,
    asset_graph: Any,
    key: dg.AssetKey,
    partition: str | None,
    record: dg.EventLogRecord,
    inputs: _InputEvents,
) -> Iterator[str]:
    """Why the partition whose latest materialization is `record` is stale (see `stale_causes`)."""
    materialization = record.event_log_entry.asset_materialization
    tags = (materialization.tags if materialization is not None else None) or {}
    code_version = asset_graph.get(key).code_version
    if code_version and tags.get(c.CODE_VERSION_TAG) != code_version:
        yield "has a new code version"
    parents = _parent_partitions(instance, asset_graph, key, partition)
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
            if inputs.version(item) != tags.get(f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/{name}"):
                yield f"{name} has a new data version"
            continue
        cursor = None if pointer == c.NULL_EVENT_POINTER else int(pointer)
        updated = next(
            (part for part in partitions if part is not None and inputs.is_updated(item, part, cursor)),
            None,
        )
        if updated is not None:
            yield f"{name}[{updated}] has a new data version"


def _parent_partitions(
    instance: dg.DagsterInstance, asset_graph: Any, key: dg.AssetKey, partition: str | None
) -> dict[dg.AssetKey, list[str | None]]:
    """The partitions of each input that `partition` of `key` reads. An input partitioned as `key`
    is and mapped one to one reads the same key: said here, since Dagster's mapping of one time
    window partition walks every window of the definition (quadratic over a model's partitions)."""
    node = asset_graph.get(key)
    parents: dict[dg.AssetKey, list[str | None]] = {}
    for parent_key in node.parent_keys:
        parent_def = asset_graph.get(parent_key).partitions_def
        if parent_def is None:
            parents[parent_key] = [None]
        elif (
            partition is not None
            and parent_def == node.partitions_def
            and _is_one_to_one(asset_graph.get_partition_mapping(key, parent_key))
        ):
            parents[parent_key] = [partition]
        else:
            break
    else:
        return parents
    parents = {}
    # A dynamic partitions definition reads its keys from the instance (a sensor's tick has none set).
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        for parent in asset_graph.get_parents_partitions(key, partition).parent_partitions:
            parents.setdefault(parent.asset_key, []).append(parent.partition_key)
    return parents


def _is_one_to_one(mapping: dg.PartitionMapping) -> bool:
    if isinstance(mapping, dg.IdentityPartitionMapping):
        return True
    return (
        isinstance(mapping, dg.TimeWindowPartitionMapping)
        and mapping.start_offset == 0
        and mapping.end_offset == 0
    )


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
