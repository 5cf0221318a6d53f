"""SQL models as assets: code_version = model fingerprint, deps from the pipeline, partitions from
`partitioned_by`. The body plans the build; the StrataIOManager runs it inside DuckDB."""

from collections.abc import Mapping

import dagster as dg

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.build import StrataBuild, StrataBuildInput
from strata_dagster.orchestration.companions import PartitionCompanion
from strata_dagster.orchestration.provenance import EVENTS_LOGGED, known_data_version
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator


def build_model_asset(
    props: StrataAssetProps,
    nodes: Mapping[str, StrataAssetProps],
    translator: StrataDagsterTranslator,
    whole_keys: Mapping[str, dg.AssetKey],
    companions: Mapping[str, PartitionCompanion] | None = None,
) -> dg.AssetsDefinition:
    """The asset of model `props.name`; `nodes` describes every source and model by name,
    `whole_keys` the companion of each partitioned node that has an unpartitioned consumer, and
    `companions` the partitions companion each partitioned model reads its `from` model through."""
    name = props.name
    key = translator.get_asset_key(props)
    partitions_def = translator.get_partitions_def(props)
    companions = companions or {}
    # The companions to refresh: this model's (it is read by partition), or the one this model
    # reads its `from` through (the engine may rebuild that model on the way).
    refreshed = list({item.key: item for item in companions.values() if item.upstream == name}.values())
    reads_through = companions.get(name)
    if reads_through is not None:
        refreshed.append(reads_through)
    inputs: list[StrataBuildInput] = []
    deps: list[dg.AssetDep] = []
    for ref in props.references:
        upstream = nodes[ref]
        upstream_key = translator.get_asset_key(upstream)
        if reads_through is not None and ref == reads_through.upstream:
            # Staleness per partition: through the companion, which keeps `ref` in the lineage.
            deps.append(dg.AssetDep(reads_through.key))
        else:
            deps.append(
                dg.AssetDep(upstream_key, partition_mapping=translator.get_partition_mapping(props, upstream))
            )
        if upstream.partitioned_by is None:
            inputs.append(StrataBuildInput(ref, upstream_key, upstream.kind, None))
        elif partitions_def is None and ref in whole_keys:
            # Dagster does not carry staleness from a partitioned asset to an unpartitioned one:
            # the companion's single data version does.
            deps.append(dg.AssetDep(whole_keys[ref]))
            inputs.append(StrataBuildInput(ref, whole_keys[ref], upstream.kind, None))
    metadata = dict(translator.get_metadata(props))
    lineage = translator.get_column_lineage(
        props, {ref: translator.get_asset_key(nodes[ref]) for ref in props.references}
    )
    if lineage is not None:
        metadata[c.COLUMN_LINEAGE_KEY] = lineage
    column_schema = metadata.get(c.COLUMN_SCHEMA_KEY)
    if isinstance(column_schema, dg.TableSchemaMetadataValue):
        column_schema = column_schema.schema
    if not isinstance(column_schema, dg.TableSchema):
        column_schema = None  # a translator that put something else there: no constraints to carry
    code_version = props.code_version or ""
    sql = props.sql or ""
    whole_key = whole_keys.get(name)

    @dg.asset(
        key=key,
        deps=deps,
        code_version=code_version,
        description=translator.get_description(props),
        group_name=translator.get_group_name(props),
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run() if partitions_def is not None else None,
        metadata=metadata,
        tags=dict(translator.get_tags(props)),
        owners=list(translator.get_owners(props)),
        kinds=translator.get_kinds(props),
        automation_condition=translator.get_automation_condition(props),
        freshness_policy=translator.get_freshness_policy(props),
        io_manager_key=c.STRATA_IO_MANAGER_KEY,
        pool=c.DUCKDB_POOL,
    )
    def _model(context: dg.AssetExecutionContext) -> dg.Output[StrataBuild]:
        known = tuple(
            StrataBuildInput(
                item.name, item.asset_key, item.kind, known_data_version(context.instance, item.asset_key)
            )
            for item in inputs
        )
        partition_keys = tuple(context.partition_keys) if partitions_def is not None else None
        build = StrataBuild(
            name,
            code_version,
            sql,
            known,
            partition_keys,
            whole_key,
            tuple(item.refresh() for item in refreshed),
            column_schema,
        )
        # A partitioned build logs one materialization per partition (its own data version) itself.
        return dg.Output(build, metadata=EVENTS_LOGGED if partition_keys is not None else None)

    return _model
