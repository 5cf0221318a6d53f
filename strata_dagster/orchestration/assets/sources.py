"""Sources as observable source assets whose data version is their content fingerprint.

An unpartitioned source reports one fingerprint (the engine's, so Dagster's view of "changed" is
the engine's). A partitioned source reports one fingerprint per partition of its partitions
definition (`DataVersionsByPartition`), and its companion `<source>__whole` the fingerprint of the
whole source, for consumers that are not partitioned: observing either observes both. Observing an
unpartitioned source that partitioned models read as `from` also records the changed partitions of
its partitions companions (see assets.companions).
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, TypedDict

import dagster as dg

from strata_dagster.compile.relations import model_view
from strata_dagster.engine.reads.arrivals import partition_versions as partition_versions_of
from strata_dagster.engine.reads.partition_status import source_partitions, whole_content
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.companions import PartitionCompanion, companion_observations
from strata_dagster.orchestration.checks.stale_partitions import StaleCheckReporter
from strata_dagster.orchestration.failures import fails_cleanly
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

POOL_TAGS = {"dagster/concurrency_key": c.DUCKDB_POOL}


def build_source_assets(
    props: StrataAssetProps,
    translator: StrataDagsterTranslator,
    names: ProjectNames,
    companions: Sequence[PartitionCompanion] = (),
    reporter: StaleCheckReporter | None = None,
) -> Sequence[dg.AssetsDefinition | dg.SourceAsset]:
    """The source's observable asset(s); `companions`: the partitions companions of an
    unpartitioned source, which its observations keep up to date; `reporter`: the stale-partitions
    checks every observation re-evaluates."""
    reporter = reporter or StaleCheckReporter()
    if props.partitioned_by is None:
        return [_unpartitioned(props, translator, names, companions, reporter)]
    return _partitioned(props, translator, names, reporter)


class _Common(TypedDict):
    """The keyword arguments every observable source asset of a model or source takes."""

    description: str | None
    group_name: str | None
    metadata: dict[str, Any]
    tags: dict[str, str]
    op_tags: dict[str, str]
    required_resource_keys: set[str]


def _common(props: StrataAssetProps, translator: StrataDagsterTranslator, names: ProjectNames) -> _Common:
    return {
        "description": translator.get_description(props),
        "group_name": translator.get_group_name(props),
        "metadata": dict(translator.get_metadata(props)),
        # Observable source assets take no `kinds`: Dagster reads them from these tags.
        "tags": {
            **translator.get_tags(props),
            **{f"{c.KIND_TAG_PREFIX}{kind}": "" for kind in translator.get_kinds(props)},
        },
        "op_tags": POOL_TAGS,
        "required_resource_keys": {names.resource_key},
    }


def _observe_whole(context: dg.OpExecutionContext, strata: StrataResource, name: str) -> dg.ObserveResult:
    state = observe_sources(strata.project_path, strata.warehouse_path, [name])[name]
    return dg.ObserveResult(
        data_version=dg.DataVersion(state.fingerprint),
        metadata={
            c.ROWS_KEY: state.row_count,
            c.RELATION_KEY: state.relation,
            "dagster/row_count": state.row_count,
        },
    )


def _unpartitioned(
    props: StrataAssetProps,
    translator: StrataDagsterTranslator,
    names: ProjectNames,
    companions: Sequence[PartitionCompanion],
    reporter: StaleCheckReporter,
) -> dg.SourceAsset:
    name = props.name
    resource_key = names.resource_key

    @dg.observable_source_asset(
        key=translator.get_asset_key(props),
        automation_condition=translator.get_automation_condition(props),
        **_common(props, translator, names),
    )
    @fails_cleanly
    def _observe(context: dg.OpExecutionContext) -> dg.ObserveResult:
        strata: StrataResource = getattr(context.resources, resource_key)
        result = _observe_whole(context, strata, name)
        for companion in companions:
            for event in companion_observations(context.instance, strata, companion.refresh()):
                context.log_event(event)
        reporter.log_changed(context, strata)
        return result

    return _observe


def _partitioned(
    props: StrataAssetProps,
    translator: StrataDagsterTranslator,
    names: ProjectNames,
    reporter: StaleCheckReporter,
) -> list[dg.SourceAsset]:
    name = props.name
    resource_key = names.resource_key
    key = translator.get_asset_key(props)
    whole_key = translator.get_whole_asset_key(props)
    partitions_def = translator.get_partitions_def(props)
    assert partitions_def is not None

    def partition_versions(
        context: dg.OpExecutionContext, strata: StrataResource
    ) -> dict[str, dg.DataVersion]:
        if props.arrives_from is not None:
            return arrival_versions(context.instance, partitions_def, strata, name)
        keys = partitions_def.get_partition_keys()
        contents = source_partitions(strata.project_path, strata.warehouse_path, name, keys)
        return {key: dg.DataVersion(content.fingerprint) for key, content in contents.items()}

    @dg.observable_source_asset(key=key, partitions_def=partitions_def, **_common(props, translator, names))
    @fails_cleanly
    def _observe(context: dg.OpExecutionContext) -> dg.DataVersionsByPartition:
        strata: StrataResource = getattr(context.resources, resource_key)
        whole = _observe_whole(context, strata, name)
        context.log_event(
            dg.AssetObservation(
                asset_key=whole_key,
                tags={c.DATA_VERSION_TAG: whole.data_version.value},  # type: ignore[union-attr]  # an observed source always has a data version
                metadata=whole.metadata,
            )
        )
        versions = partition_versions(context, strata)
        reporter.log_changed(context, strata)
        return dg.DataVersionsByPartition(versions)

    common = _common(props, translator, names)
    common["description"] = (
        f"All partitions of `{name}` as one version, for consumers that are not partitioned."
    )

    @dg.observable_source_asset(
        key=whole_key,
        automation_condition=translator.get_automation_condition(
            dataclasses.replace(props, partitioned_by=None)
        ),
        **common,
    )
    @fails_cleanly
    def _observe_all(context: dg.OpExecutionContext) -> dg.ObserveResult:
        strata: StrataResource = getattr(context.resources, resource_key)
        for partition, version in partition_versions(context, strata).items():
            context.log_event(
                dg.AssetObservation(
                    asset_key=key, partition=partition, tags={c.DATA_VERSION_TAG: version.value}
                )
            )
        result = _observe_whole(context, strata, name)
        reporter.log_changed(context, strata)
        return result

    return [_observe, _observe_all]


def arrival_versions(
    instance: dg.DagsterInstance, partitions_def: dg.PartitionsDefinition, strata: StrataResource, name: str
) -> dict[str, dg.DataVersion]:
    """A business-versioned source's per-partition versions from its evidence (no row read): its
    complete partitions up to the frontier. Dynamic partitions get the keys they lack; a date
    after the time partitions' end (a drop dated after the last complete day) waits for its key."""
    versions = partition_versions_of(strata.project_path, strata.warehouse_path, name).versions
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        assert partitions_def.name is not None
        known = set(instance.get_dynamic_partitions(partitions_def.name))
        missing = [key for key in versions if key not in known]
        if missing:
            instance.add_dynamic_partitions(partitions_def.name, missing)
        return {key: dg.DataVersion(version) for key, version in versions.items()}
    known = set(partitions_def.get_partition_keys())
    return {key: dg.DataVersion(version) for key, version in versions.items() if key in known}


def build_whole_model_asset(
    props: StrataAssetProps,
    translator: StrataDagsterTranslator,
    names: ProjectNames,
    reporter: StaleCheckReporter | None = None,
) -> dg.SourceAsset:
    """The companion of a partitioned model read by unpartitioned models: the whole live view's
    content as one data version. The model's step observes it after every build."""
    name = props.name
    resource_key = names.resource_key
    common = _common(props, translator, names)
    common["description"] = (
        f"All partitions of `{name}` as one version, for consumers that are not partitioned."
    )

    @dg.observable_source_asset(key=translator.get_whole_asset_key(props), **common)
    @fails_cleanly
    def _observe_all(context: dg.OpExecutionContext) -> dg.ObserveResult:
        strata: StrataResource = getattr(context.resources, resource_key)
        whole = whole_content(strata.warehouse_path, model_view(name, strata.branch))
        if reporter is not None:
            reporter.log_changed(context, strata)
        return dg.ObserveResult(
            data_version=dg.DataVersion(whole.fingerprint), metadata={c.ROWS_KEY: whole.row_count}
        )

    return _observe_all
