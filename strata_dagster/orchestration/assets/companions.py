"""Partitions companions: an unpartitioned model's (or source's) rows per partition of a partitioned
model that reads it as `from`, so that Dagster's staleness reaches exactly the partitions the engine
rebuilds.

Dagster makes every partition of an asset stale when an unpartitioned asset it depends on gets a new
data version. The engine does less: a partition-complete build of `daily_revenue` (`from stg_orders`,
`partitioned_by: day(order_day)`) fingerprints `stg_orders`'s rows per day and recomputes only the
days whose rows changed. So `daily_revenue` does not depend on `stg_orders` directly but on
`stg_orders__by_day`: an external asset with `daily_revenue`'s partitions, one data version per day
(the content fingerprint of `stg_orders`'s live rows of that day, the figures the engine compares),
itself downstream of `stg_orders` so the lineage stays. Every build of `stg_orders` records an
observation (and a materialization, for the UI's partition status) of each day whose rows changed (and a build of `daily_revenue` does too, when the engine
rebuilt `stg_orders` on the way), so after a one-row change exactly that day is stale; an
unchanged day keeps its data version. A partitioned model whose `from` is an unpartitioned source
reads it the same way: each observation of the source records the changed partitions.
"""

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from strata_dagster.engine.reads.catalog import Catalog
from strata_dagster.engine.reads.partition_status import input_partitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.stale_partitions import StaleCheckReporter
from strata_dagster.orchestration.failures import fails_cleanly
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator


@dataclass(frozen=True)
class CompanionRefresh:
    """A partitions companion to bring up to date after a build: the rows of an unpartitioned model
    per partition of `reader`, a partitioned model that reads it as `from`."""

    asset_key: dg.AssetKey
    reader: str
    partition_keys: tuple[str, ...]


@dataclass(frozen=True)
class PartitionCompanion:
    """`upstream`'s rows per partition, as the partitioned models `readers` group them alike."""

    key: dg.AssetKey
    upstream: str  # the unpartitioned source or model
    readers: tuple[str, ...]  # partitioned models reading it as `from`; the first one's grouping
    partitions_def: dg.PartitionsDefinition

    def refresh(self) -> CompanionRefresh:
        """What a build refreshes: every partition there is now (time partitions can grow)."""
        return CompanionRefresh(self.key, self.readers[0], tuple(self.partitions_def.get_partition_keys()))


def partition_companions(
    catalog: Catalog, nodes: Mapping[str, StrataAssetProps], translator: StrataDagsterTranslator
) -> dict[str, PartitionCompanion]:
    """The companion each partitioned model reads its unpartitioned `from` (a model or a source)
    through, by reader.

    Readers whose partitions group the upstream's rows alike (the same expression) share one; two
    groupings the translator names alike get the second reader's name appended.
    """
    groups: dict[dg.AssetKey, list[str]] = {}
    groupings: dict[dg.AssetKey, str] = {}
    for name in catalog.project.order:
        found = catalog.partition_inputs.get(name)
        if found is None:
            continue
        key = translator.get_partition_companion_key(nodes[found.upstream], nodes[name])
        if groupings.setdefault(key, found.grouping) != found.grouping:
            key = dg.AssetKey([*key.path[:-1], f"{key.path[-1]}__{name}"])
            groupings[key] = found.grouping
        groups.setdefault(key, []).append(name)
    companions: dict[str, PartitionCompanion] = {}
    for key, readers in groups.items():
        companion = PartitionCompanion(
            key,
            catalog.partition_inputs[readers[0]].upstream,
            tuple(readers),
            _partitions_def([nodes[reader] for reader in readers], translator),
        )
        companions.update((reader, companion) for reader in readers)
    return companions


def _partitions_def(
    readers: Sequence[StrataAssetProps], translator: StrataDagsterTranslator
) -> dg.PartitionsDefinition:
    """The readers' partitions; when they differ, from the first to the last partition of any."""
    defs = [translator.get_partitions_def(reader) for reader in readers]
    if all(item == defs[0] for item in defs) and defs[0] is not None:
        return defs[0]
    bounds = [reader.bounds for reader in readers if reader.bounds is not None]
    union = (
        dataclasses.replace(bounds[0], first=min(b.first for b in bounds), last=max(b.last for b in bounds))
        if bounds
        else None
    )
    merged = translator.get_partitions_def(dataclasses.replace(readers[0], bounds=union))
    assert merged is not None
    return merged


def companion_asset(
    companion: PartitionCompanion,
    nodes: Mapping[str, StrataAssetProps],
    translator: StrataDagsterTranslator,
    names: ProjectNames,
    reporter: StaleCheckReporter | None = None,
) -> dg.AssetsDefinition:
    """The companion as an observable asset downstream of its model or source: never stale itself,
    observed by the builds of its model (or the observations of its source) and of its readers,
    and by its own Observe, which records the partitions whose rows changed.

    Observable, not merely external: the UI shows an observable asset by its last observation
    ("Observed"). Its partitions' status (the Partitions tab, the lineage node's fill) counts
    materialized partitions only, so each changed partition is also recorded as materialized
    (`companion_observations`): never "Missing (365)" nor "0% filled"."""
    resource_key = names.resource_key

    @dg.multi_observable_source_asset(
        specs=[companion_spec(companion, nodes, translator)],
        name=f"observe_{companion.key.to_python_identifier()}",
        required_resource_keys={resource_key},
    )
    @fails_cleanly
    def _observe(context: dg.OpExecutionContext) -> Iterator[dg.AssetObservation | dg.AssetMaterialization]:
        strata: StrataResource = getattr(context.resources, resource_key)
        # A generator without output: the events are the changed partitions' observations; a
        # returning body would add one more, for no partition, with no data version.
        yield from companion_observations(context.instance, strata, companion.refresh())
        if reporter is not None:
            reporter.log_changed(context, strata)

    return in_pool(_observe, c.DUCKDB_POOL)


def in_pool(assets_def: dg.AssetsDefinition, pool: str) -> dg.AssetsDefinition:
    """`assets_def` with its op in `pool`, rebuilt through Dagster's public constructors:
    `multi_observable_source_asset` takes no pool, and an observation opens the warehouse like any
    build (one writer per DuckDB file)."""
    op = assets_def.op
    pooled = dg.OpDefinition(
        compute_fn=op.compute_fn,
        name=op.name,
        ins={item.name: dg.In.from_definition(item) for item in op.input_defs},
        outs={item.name: dg.Out.from_definition(item) for item in op.output_defs},
        description=op.description,
        required_resource_keys=op.required_resource_keys,
        tags=op.tags,
        pool=pool,
    )
    return dg.AssetsDefinition(
        keys_by_input_name=assets_def.keys_by_input_name,
        keys_by_output_name=assets_def.keys_by_output_name,
        node_def=pooled,
        specs=list(assets_def.specs),
        execution_type=assets_def.execution_type,
        can_subset=assets_def.can_subset,
    )


def companion_spec(
    companion: PartitionCompanion, nodes: Mapping[str, StrataAssetProps], translator: StrataDagsterTranslator
) -> dg.AssetSpec:
    """What the companion asset declares (see `companion_asset`)."""
    upstream = nodes[companion.upstream]
    readers = ", ".join(f"`{reader}`" for reader in companion.readers)
    spec = nodes[companion.readers[0]].partitioned_by
    assert spec is not None
    recorder = "observation" if upstream.kind == "source" else "materialization"
    return dg.AssetSpec(
        key=companion.key,
        skippable=True,  # its observations are the partitions' events, no output for the whole
        deps=[translator.get_asset_key(upstream)],
        description=(
            f"The rows of `{upstream.name}` per {spec.grain} partition of {readers}, one data version "
            f"each: a change of `{upstream.name}` makes exactly the partitions whose rows changed stale. "
            f"Every {recorder} of `{upstream.name}` records its changed partitions. A strata "
            "implementation detail (the engine's per-partition view of its input), not a table: "
            "it is observed, never materialized."
        ),
        group_name=translator.get_group_name(upstream),
        partitions_def=companion.partitions_def,
        metadata={
            c.COMPANION_OF_KEY: upstream.name,
            c.READERS_KEY: ", ".join(companion.readers),
            c.PARTITIONED_BY_KEY: f"{spec.grain}({spec.column})",
        },
        tags={c.COMPANION_TAG: c.PARTITIONS_COMPANION},
        kinds={"duckdb", c.COMPANION_KIND},
    )


def companion_observations(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    refresh: CompanionRefresh,
    run_id: str | None = None,
) -> list[dg.AssetObservation | dg.AssetMaterialization]:
    """The events of the partitions of companion `refresh` whose rows differ from the data version
    Dagster last recorded (all of them the first time), for a model's step (after a build: the
    strata `run_id`) or a source's observation to log. Unchanged partitions get no event: their
    readers stay fresh.

    Each changed partition gets an observation (the data version its readers' staleness reads:
    an external asset's versions are its observations) and a materialization with the same
    version (Dagster's partition status, the Partitions tab and the lineage node's fill, counts
    materialized partitions only: without it every partition reads "Missing")."""
    contents = input_partitions(
        strata.project_path, strata.warehouse_path, refresh.reader, refresh.partition_keys, strata.branch
    )
    known = instance.event_log_storage.get_latest_tags_by_partition(
        refresh.asset_key, dg.DagsterEventType.ASSET_OBSERVATION, [c.DATA_VERSION_TAG]
    )
    events: list[dg.AssetObservation | dg.AssetMaterialization] = []
    for key in refresh.partition_keys:
        if known.get(key, {}).get(c.DATA_VERSION_TAG) == contents[key].fingerprint:
            continue
        tags = {c.DATA_VERSION_TAG: contents[key].fingerprint}
        metadata: dict[str, int | str] = {
            c.ROWS_KEY: contents[key].row_count,
            **({c.RUN_ID_KEY: run_id} if run_id else {}),
        }
        events.append(
            dg.AssetObservation(asset_key=refresh.asset_key, partition=key, tags=tags, metadata=metadata)
        )
        events.append(
            dg.AssetMaterialization(asset_key=refresh.asset_key, partition=key, tags=tags, metadata=metadata)
        )
    return events
