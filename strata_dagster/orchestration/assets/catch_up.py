"""Dagster's records brought up to what the warehouse's history says: one history for the CLI and
Dagster.

The warehouse's history is the record of what every live view shows and what it was built from,
whoever built it (`strata run`, `backfill`, `rollback`, `promote`, or a Dagster step). Dagster's
staleness reads its own event log instead. `catch_up` compares the two and yields the events Dagster
lacks, upstream first, each stored before the next is computed (the caller reports or yields them
one by one):

- a source's observation with the fingerprint a strata run read (when the caller passes them: the
  CLI after a run), and the partitions companions of the source;
- for each SQL model whose live state Dagster has not recorded (another content or code version,
  per partition for a partitioned model), a materialization with the live state's data version,
  code version and provenance: each input's identity as the build that made the state read it
  (after a rollback, the build of the entry it restored: a state an early cutoff kept since reads
  the restored inputs again), so a rolled-back state is stale against inputs that moved on, as
  `strata plan` says, and each input's latest event as its pointer; then its partitions
  companions and its `__whole` companion.

What the definitions hold (asset keys, partitions, companions) is read from their asset graph
(`strata/model`, `strata/source` metadata and the `strata/companion` tag), so a translator's keys
are followed. Python models are left out (the CLI does not build them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from strata_dagster.compile.relations import model_view
from strata_dagster.engine.plan import ModelPlan, plan
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.engine.reads.partition_status import (
    LiveState,
    live_states,
    model_partitions,
    whole_content,
)
from strata_dagster.engine.run import RunRequest
from strata_dagster.language import load_project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.companions import CompanionRefresh, companion_observations
from strata_dagster.orchestration.assets.provenance import (
    INITIAL_DATA_VERSION,
    ModelInput,
    latest_record,
    recorded_data_version,
    stale_by_provenance,
)
from strata_dagster.orchestration.checks.stale_partitions import answer_of
from strata_dagster.orchestration.resources.strata import StrataResource

Event = dg.AssetMaterialization | dg.AssetObservation


@dataclass(frozen=True)
class StrataAssets:
    """The strata assets of a set of definitions, by what they are (read from the asset graph)."""

    models: dict[dg.AssetKey, str] = field(default_factory=dict)  # SQL model assets, in build order
    sources: dict[dg.AssetKey, str] = field(default_factory=dict)  # unpartitioned source assets
    wholes: dict[str, dg.AssetKey] = field(default_factory=dict)  # model or source -> `__whole`
    companions: dict[dg.AssetKey, CompanionRefresh] = field(default_factory=dict)
    companion_of: dict[dg.AssetKey, str] = field(default_factory=dict)  # companion -> upstream
    names: dict[dg.AssetKey, str] = field(default_factory=dict)  # any strata asset -> its node's name


def strata_assets(asset_graph: Any, sql_models: set[str]) -> StrataAssets:
    """The strata assets of `asset_graph` (a Definitions' resolved asset graph); `sql_models`: the
    project's SQL model names (a Python model is materialized only by Dagster)."""
    found = StrataAssets()
    partitioned_sources = set()
    for key in asset_graph.toposorted_asset_keys:
        node = asset_graph.get(key)
        metadata = node.metadata or {}
        if (node.tags or {}).get(c.COMPANION_TAG) == c.PARTITIONS_COMPANION:
            upstream = _text(metadata.get(c.COMPANION_OF_KEY))
            reader = _text(metadata.get(c.READERS_KEY)).split(",")[0].strip()
            keys = tuple(node.partitions_def.get_partition_keys()) if node.partitions_def else ()
            found.companions[key] = CompanionRefresh(key, reader, keys)
            found.companion_of[key] = upstream
            continue
        model, source = _text(metadata.get(c.MODEL_KEY)), _text(metadata.get(c.SOURCE_KEY))
        if model:
            found.names[key] = model
            if node.is_materializable and model in sql_models:
                found.models[key] = model
            elif not node.is_materializable:
                found.wholes[model] = key
        elif source:
            found.names[key] = source
            if node.partitions_def is not None:
                partitioned_sources.add(source)
            else:
                found.sources[key] = source
    for key, source in list(found.sources.items()):
        if source in partitioned_sources:  # `<source>__whole`, beside the partitioned source
            del found.sources[key]
            found.wholes[source] = key
    return found


def _text(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


def catch_up(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    asset_graph: Any,
    *,
    source_versions: Mapping[str, str] | None = None,
    models: set[str] | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Iterator[Event]:
    """The events Dagster lacks for the live state of the project's models (only `models`, when
    given) and for `source_versions` (source -> the fingerprint a run read). `description` and
    `metadata` go on every event (who recorded it, from which run). Read-only on the warehouse."""
    project = load_project(strata.project_path)
    assets = strata_assets(asset_graph, set(project.models))
    extra = dict(metadata or {})
    for key, name in assets.sources.items():
        version = (source_versions or {}).get(name)
        known = recorded_data_version(latest_record(instance, ModelInput(key, is_observed=True)))
        if version is not None and version != known:
            yield dg.AssetObservation(
                asset_key=key, tags={c.DATA_VERSION_TAG: version}, description=description, metadata=extra
            )
            yield from _companions_of(instance, strata, assets, name)
    wanted = {name for name in assets.models.values() if models is None or name in models}
    # The wanted models' live states, and their input models': a state's inputs are compared with theirs.
    inputs = {ref for name in wanted for ref in project.models[name].references if ref in project.models}
    live = live_states(strata.warehouse_path, sorted(wanted | inputs), strata.branch)
    for key, name in assets.models.items():
        state = live.get(name)
        if state is None or name not in wanted:
            continue
        node = asset_graph.get(key)
        if node.partitions_def is None:
            events = _unpartitioned(instance, strata, asset_graph, assets, key, live, description, extra)
        else:
            events = _partitioned(instance, strata, asset_graph, assets, key, live, description, extra)
        changed = False
        for event in events:
            changed = True
            yield event
        if not changed:
            continue
        yield from _companions_of(instance, strata, assets, name)
        whole = assets.wholes.get(name)
        if whole is not None and node.partitions_def is not None:
            content = whole_content(strata.warehouse_path, model_view(name, strata.branch))
            known = recorded_data_version(latest_record(instance, ModelInput(whole, is_observed=True)))
            if content.fingerprint != known:
                yield dg.AssetObservation(
                    asset_key=whole,
                    tags={c.DATA_VERSION_TAG: content.fingerprint},
                    description=description,
                    metadata={c.ROWS_KEY: content.row_count, **extra},
                )


def _companions_of(
    instance: dg.DagsterInstance, strata: StrataResource, assets: StrataAssets, upstream: str
) -> Iterator[dg.AssetObservation | dg.AssetMaterialization]:
    for key, refresh in assets.companions.items():
        if assets.companion_of[key] == upstream:
            yield from companion_observations(instance, strata, refresh)


def _unpartitioned(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    asset_graph: Any,
    assets: StrataAssets,
    key: dg.AssetKey,
    live: Mapping[str, LiveState],
    description: str | None,
    metadata: Mapping[str, Any],
) -> Iterator[dg.AssetMaterialization]:
    state = live[assets.models[key]]
    record = instance.get_latest_data_version_record(key, is_source=False)
    provenance = _provenance(instance, asset_graph, assets, key, live, state.content_hash)
    if provenance.reads_older_inputs and _is_kept_by_plan(strata, state.model):
        # A rollback restored the entry of an older build, but a build from today's inputs gave
        # this same snapshot (an early cutoff kept it): it is up to date with them.
        provenance = _provenance(instance, asset_graph, assets, key, live, state.content_hash, as_read=False)
    if record is not None and provenance.is_recorded_on(record):
        return
    counts = {} if state.is_view else {c.ROWS_KEY: state.row_count, c.ROW_COUNT_KEY: state.row_count}
    yield dg.AssetMaterialization(
        asset_key=key,
        tags=provenance.tags,
        description=description,
        metadata={c.SNAPSHOT_KEY: state.snapshot_id, **counts, **metadata},
    )


def _partitioned(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    asset_graph: Any,
    assets: StrataAssets,
    key: dg.AssetKey,
    live: Mapping[str, LiveState],
    description: str | None,
    metadata: Mapping[str, Any],
) -> Iterator[dg.AssetMaterialization]:
    state = live[assets.models[key]]
    partitions_def = asset_graph.get(key).partitions_def
    every = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    known = instance.event_log_storage.get_latest_tags_by_partition(
        key, dg.DagsterEventType.ASSET_MATERIALIZATION, [c.DATA_VERSION_TAG]
    )
    # Dagster queries only data versions by partition: the latest event of any partition says which
    # code and unpartitioned inputs it last saw, and others than the live state's re-record every
    # partition.
    latest = instance.get_latest_data_version_record(key, is_source=False)
    provenance = _provenance(instance, asset_graph, assets, key, live, "")  # no event of this model moves it
    same = latest is not None and provenance.is_recorded_on(latest, data_version=False)
    project = load_project(strata.project_path)
    contents = model_partitions(project, strata.warehouse_path, state.model, every, strata.branch)
    changed = [
        partition
        for partition in every
        if not same or known.get(partition, {}).get(c.DATA_VERSION_TAG) != contents[partition].fingerprint
    ]
    changed += _rebuilt_alike(instance, strata, asset_graph, key, state.model, every, set(changed))
    behind = _behind_companions(instance, strata, asset_graph, assets, key, live)
    changed += [partition for partition in behind if partition not in set(changed)]
    for partition in changed:
        part = contents[partition]
        yield dg.AssetMaterialization(
            asset_key=key,
            partition=partition,
            tags={**provenance.tags, **behind.get(partition, {}), c.DATA_VERSION_TAG: part.fingerprint},
            description=description,
            metadata={
                c.SNAPSHOT_KEY: state.snapshot_id,
                c.ROWS_KEY: part.row_count,
                c.PARTITION_ROW_COUNT_KEY: part.row_count,
                c.ROW_COUNT_KEY: state.row_count,
                **metadata,
            },
        )


def _behind_companions(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    asset_graph: Any,
    assets: StrataAssets,
    key: dg.AssetKey,
    live: Mapping[str, LiveState],
) -> dict[str, dict[str, str]]:
    """For a live state whose build read another snapshot of a companion's upstream than the live
    one (a rollback restored it), or built some partitions only (a backfill's, restored or not):
    the partitions the engine finds stale, each with its companion
    pointers set before that companion partition's latest event, so that Dagster shows them stale
    as the plan does (an event pointer is Dagster's only record of what a partition read)."""
    state = live[assets.models[key]]
    companions = [parent for parent in asset_graph.get(key).parent_keys if parent in assets.companion_of]
    behind_upstream = any(
        (upstream := live.get(assets.companion_of[parent])) is not None
        and state.input_snapshots.get(upstream.model, upstream.snapshot_id) != upstream.snapshot_id
        for parent in companions
    )
    if not companions or not (behind_upstream or state.is_partial):
        return {}
    engine = stale_partitions(strata.project_path, strata.warehouse_path, strata.branch).get(state.model)
    if engine is None or engine.is_all:
        return {}
    behind: dict[str, dict[str, str]] = {}
    for partition in engine.keys:
        for parent in companions:
            records = instance.fetch_observations(
                dg.AssetRecordsFilter(asset_key=parent, asset_partitions=[partition]), limit=1
            ).records
            if records:
                pointer = f"{c.INPUT_EVENT_POINTER_TAG_PREFIX}/{parent.to_user_string()}"
                behind.setdefault(partition, {})[pointer] = str(records[0].storage_id - 1)
    return behind


def _rebuilt_alike(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    asset_graph: Any,
    key: dg.AssetKey,
    model: str,
    every: Sequence[str],
    changed: set[str],
) -> list[str]:
    """The partitions Dagster shows stale (an input partition has a newer version than the one
    their latest materialization read) that are up to date (rebuilt with the same rows, kept, or
    rolled back together with their input, by builds Dagster did not record): by `strata plan
    --only-stale`'s answer (the check's), or, when the plan takes the whole model (a rollback it
    would publish again, an upstream rebuilt first), by the engine's per-partition figures."""
    stale = stale_by_provenance(
        instance, asset_graph, key, [partition for partition in every if partition not in changed]
    )
    shown = [partition for partition in every if partition in stale]
    if not shown:
        return []
    planned = _planned(strata, model)
    answer = answer_of(planned, every) if planned is not None else None
    if answer is not None and not (answer.waits_for or answer.is_missing or answer.is_all):
        stale = set(answer.keys)
        return [partition for partition in shown if partition not in stale]
    # The plan rebuilds (or publishes again) all of it, or waits for an upstream: the engine's
    # per-partition figures tell the partitions whose input rows are those it was built from.
    engine = stale_partitions(strata.project_path, strata.warehouse_path, strata.branch).get(model)
    if engine is None or engine.is_all or (answer is not None and answer.is_missing):
        return []  # nothing tells them apart: Dagster's staleness stands
    return [partition for partition in shown if partition not in set(engine.keys)]


def _is_kept_by_plan(strata: StrataResource, model: str) -> bool:
    """Whether `strata plan --only-stale` keeps `model`'s live snapshot as it is (nothing to build
    or publish again): the snapshot a build from today's inputs gives."""
    planned = _planned(strata, model)
    return planned is not None and planned.path == "reused" and not planned.would_change


def _planned(strata: StrataResource, model: str) -> ModelPlan | None:
    """What `strata plan --only-stale --models <model>` says of `model`."""
    request = RunRequest(
        project_dir=strata.project_path,
        warehouse=strata.warehouse_path,
        models=(model,),
        branch=strata.branch,
        only_stale=True,
    )
    return {item.model: item for item in plan(request).models}.get(model)


@dataclass(frozen=True)
class _Provenance:
    """A materialization's tags, and those of them Dagster compares as values (the versions, and
    the data version of each unpartitioned input; a partitioned input is compared through its
    event pointer). `reads_older_inputs`: an unpartitioned input model read as another version
    than its live one."""

    tags: dict[str, str]
    compared: tuple[str, ...]
    reads_older_inputs: bool = False

    def is_recorded_on(self, record: dg.EventLogRecord, *, data_version: bool = True) -> bool:
        recorded = record.event_log_entry.tags or {}
        keys = [*self.compared, *((c.DATA_VERSION_TAG,) if data_version else ())]
        return all(recorded.get(key) == self.tags[key] for key in keys)


def _provenance(
    instance: dg.DagsterInstance,
    asset_graph: Any,
    assets: StrataAssets,
    key: dg.AssetKey,
    live: Mapping[str, LiveState],
    data_version: str,
    *,
    as_read: bool = True,
) -> _Provenance:
    """Versions and provenance: each unpartitioned input's identity as the state's build read it
    (else, or when not `as_read`, as Dagster last recorded it), and each input's latest event's
    storage id; for a partitioned input model the state read another snapshot of (a rollback
    restored it), the last event of that snapshot, so that its partitions changed since show."""
    state = live[assets.models[key]]
    tags = {
        c.CODE_VERSION_TAG: state.model_fingerprint,
        c.DATA_VERSION_TAG: data_version,
        c.DATA_VERSION_IS_USER_PROVIDED_TAG: "true",
    }
    compared = [c.CODE_VERSION_TAG]
    older = False
    for parent in asset_graph.get(key).parent_keys:
        node = asset_graph.get(parent)
        record = latest_record(instance, ModelInput(parent, is_observed=not node.is_materializable))
        name = parent.to_user_string()
        input_model = assets.names.get(parent, "")
        built_from = state.inputs.get(input_model) if node.partitions_def is None and as_read else None
        latest = recorded_data_version(record) or INITIAL_DATA_VERSION
        # Read older than live: an input model whose live state moved on (a rollback restored
        # this one). A source read newer than Dagster's latest observation is not older.
        upstream = live.get(input_model)
        older = older or (
            built_from is not None and upstream is not None and built_from != upstream.content_hash
        )
        tags[f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/{name}"] = built_from or latest
        if node.partitions_def is not None and as_read:
            record = _read_record(instance, parent, state, upstream) or record
        tags[f"{c.INPUT_EVENT_POINTER_TAG_PREFIX}/{name}"] = (
            str(record.storage_id) if record is not None else c.NULL_EVENT_POINTER
        )
        if node.partitions_def is None:
            compared.append(f"{c.INPUT_DATA_VERSION_TAG_PREFIX}/{name}")
    return _Provenance(tags, tuple(compared), older)


def _read_record(
    instance: dg.DagsterInstance, parent: dg.AssetKey, state: LiveState, parent_state: LiveState | None
) -> dg.EventLogRecord | None:
    """The latest materialization of the snapshot of partitioned input model `parent` that
    `state`'s build read, when that is not the input's live snapshot (None: it is, or no event
    names it)."""
    read = state.input_snapshots.get(parent_state.model) if parent_state is not None else None
    if parent_state is None or read is None or read == parent_state.snapshot_id:
        return None
    cursor = None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=parent), limit=500, cursor=cursor
        )
        for record in page.records:
            event = record.event_log_entry.asset_materialization
            snapshot = (event.metadata or {}).get(c.SNAPSHOT_KEY) if event is not None else None
            if getattr(snapshot, "value", snapshot) == read:
                return record
        if not page.has_more:
            return None
        cursor = page.cursor
