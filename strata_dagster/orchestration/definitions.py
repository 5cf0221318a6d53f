"""`build_definitions`: a strata project as Dagster definitions."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dagster as dg

from strata_dagster.backends.choice import backend_choice, choose_backend
from strata_dagster.backends.duckdb.settings import check_environment
from strata_dagster.compile.determinism import effective_refresh, volatile_calls
from strata_dagster.compile.partition_types import is_ordered_type, is_time_type
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.context import check_branch, check_branch_of
from strata_dagster.engine.iceberg_publication import iceberg_table
from strata_dagster.engine.reads.catalog import Catalog, read_catalog
from strata_dagster.errors import E_COMPONENT, StrataError
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.companions import companion_asset, partition_companions
from strata_dagster.orchestration.assets.models import model_assets
from strata_dagster.orchestration.assets.python_models import on_branch
from strata_dagster.orchestration.assets.selection import selected_project
from strata_dagster.orchestration.assets.sources import build_source_assets, build_whole_model_asset
from strata_dagster.orchestration.checks.family import strata_checks_op
from strata_dagster.orchestration.checks.model_checks import (
    DEFAULT_VERIFICATION_SCHEDULE,
    StrataChecks,
    build_checks,
)
from strata_dagster.orchestration.checks.stale_partitions import (
    PartitionedModel,
    StaleCheckReporter,
    stale_partitions_family,
)
from strata_dagster.orchestration.failures import raises_cleanly
from strata_dagster.orchestration.io.io_manager import StrataIOManager
from strata_dagster.orchestration.jobs.asset_jobs import build_asset_jobs
from strata_dagster.orchestration.jobs.backfills import build_backfill_jobs
from strata_dagster.orchestration.jobs.executor import GuardedProject, guard, strata_executor
from strata_dagster.orchestration.jobs.gc import StrataGcPolicy, build_gc_job
from strata_dagster.orchestration.jobs.one_run import (
    BackfillRangeConfig,
    DefinitionsRef,
    backfill_range_waves,
    build_one_run_jobs,
)
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.duckdb import StrataDuckDBResource
from strata_dagster.orchestration.resources.strata import StrataResource, default_warehouse
from strata_dagster.orchestration.sensors.arrivals import ArrivingSource
from strata_dagster.orchestration.sensors.automation import automation_sensor
from strata_dagster.orchestration.sensors.stale_sensor import stale_partitions_sensor
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator, model_relation


@raises_cleanly
def build_definitions(
    project_dir: Path | str,
    *,
    warehouse: Path | str | None = None,
    branch: str = DEFAULT_BRANCH,
    name: str | None = None,
    translator: StrataDagsterTranslator | None = None,
    python_assets: Sequence[dg.AssetsDefinition] = (),
    stale_sensor_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    verification_schedule: str | None = DEFAULT_VERIFICATION_SCHEDULE,
    verification_schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    gc: StrataGcPolicy | None = None,
    gc_schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    select: str | Sequence[str] | None = None,
    backend: str | None = None,
    spark_remote: str | None = None,
    engine: str | None = None,
) -> dg.Definitions:
    """Dagster definitions for the strata project in `project_dir`.

    Every source becomes an observable source asset (data version = content fingerprint); the
    models of each partitioning one subsettable multi-asset (code version = model fingerprint,
    data version = snapshot content, per partition for partitioned models; a partitioned model
    reads an unpartitioned `from` through its partitions companion `<from>__by_<grain>`, see
    orchestration.assets.companions), with a `StrataResource` ("strata"), a `StrataIOManager`
    ("strata_io_manager": Python models, and models read as frames), a `StrataDuckDBResource`
    ("strata_duckdb": your assets' read-only DuckDB connection to the live views), the in-process
    executor refusing strata backfill runs without a `strata/reason` tag (orchestration.jobs.executor),
    the `strata_backfill` jobs (see orchestration.jobs.backfills), the `strata_materialize_stale`
    sensor (stopped unless `stale_sensor_status` says otherwise) and the `strata_automation`
    sensor for declarative automation (stopped). `warehouse` defaults to `$STRATA_WAREHOUSE`, else
    `warehouse.duckdb` in the project folder. `python_assets` are added as they are: Python models
    (see `strata_python_model`) and Python consumers of strata models.

    `name`: the project's name in a code location holding several projects (or one project on
    several warehouses): its resource keys, jobs, ops, sensors and schedules are then
    `strata_<name>...` (`strata_shop`, `strata_shop_materialize_stale`; orchestration.naming).
    None (the default): the names above.

    Asset checks (see strata_dagster.orchestration.checks): `strata_unique` and `strata_contract`
    on the live view of every model with those pins, run with each materialization;
    Dagster's `column_schema_change` on every model with a `contract`; and
    `strata_incremental_equals_full` on every incremental or partitioned model, run by the
    `strata_verify` job and the `strata_verify_schedule` schedule (cron `verification_schedule`,
    3 AM by default; stopped unless `verification_schedule_status` says otherwise; None: no schedule).

    `gc`: a retention policy (`StrataGcPolicy(keep=10, older_than="30d")`) adds the `strata_gc` job
    (`strata gc` in the `duckdb` pool) and `strata_gc_schedule` on its cron, stopped unless
    `gc_schedule_status` says otherwise. None (the default): no retention job.

    `select`: only these models (selectors as `strata run --models` takes them: `daily_revenue`,
    `stg_*`, `tag:finance`, `+orders_enriched`) and the models they read become assets; E025 for a
    selector that matches nothing.

    `backend`: `duckdb` (default: `$STRATA_BACKEND`, else duckdb) or `spark`, with `spark_remote` a
    Spark Connect server (`sc://host:port`, default `$STRATA_SPARK_REMOTE`) or None for a local
    Spark over `warehouse` (a directory; default `spark-warehouse/` in the project folder). The
    assets, staleness, IO manager, checks and backfill guard are the same on both backends.
    `engine` is the former name of `backend`, still read when `backend` is not given.
    """
    names = ProjectNames(name)
    choice = backend_choice(backend or engine, spark_remote)
    check_environment(choice.name)  # every STRATA_* variable, where the code location loads
    choose_backend(choice)  # this process reads the catalog below, and its sensors run here
    check_branch(branch)  # E026 here, not as the resource's validation error
    resource = StrataResource(
        project_dir=str(project_dir),
        warehouse=str(warehouse if warehouse is not None else default_warehouse(project_dir)),
        branch=branch,
        backend=choice.name,
        spark_remote=choice.spark_remote,
    )
    translator = translator or StrataDagsterTranslator()
    python_assets = [on_branch(asset, branch) for asset in python_assets]
    _check_python_models(python_assets, names)
    catalog = read_catalog(resource.project_path, resource.warehouse_path, resource.branch)
    check_branch_of(catalog.project, branch)  # not a schema the sources read: E026 where it loads
    for unread in catalog.warnings:  # shown where the code location loads (`dagster dev`'s output)
        warnings.warn(unread.render(), UserWarning, stacklevel=2)
    if select:
        catalog = replace(catalog, project=selected_project(catalog.project, select))
    checks = build_checks(
        catalog.project,
        describe_nodes(catalog),
        translator,
        python_assets,
        names=names,
        executor=strata_executor,
        verification_schedule=verification_schedule,
        schedule_status=verification_schedule_status,
    )
    defs = _definitions(catalog, resource, names, translator, python_assets, stale_sensor_status, checks)
    if gc is None:
        return defs
    gc_job, gc_schedule = build_gc_job(gc, gc_schedule_status, names)
    guard(GuardedProject(resource, names), (), [gc_job.name])
    return dg.Definitions.merge(defs, dg.Definitions(jobs=[gc_job], schedules=[gc_schedule]))


def _check_python_models(python_assets: Sequence[dg.AssetsDefinition], names: ProjectNames) -> None:
    """A Python model publishes through its project's IO manager: `strata_python_model(project=)`
    must name the project this one is (build_definitions' `name`)."""
    for asset in python_assets:
        for key in asset.keys:
            if c.MODEL_KEY not in asset.metadata_by_key.get(key, {}):
                continue  # a consumer of strata models, not a model
            found = asset.get_io_manager_key_for_asset_key(key)
            if found != names.io_manager_key:
                raise StrataError(
                    E_COMPONENT,
                    f"Python model `{key.to_user_string()}` publishes through `{found}`, not this "
                    f"project's `{names.io_manager_key}`",
                    hint=f"decorate it with strata_python_model(project={names.scope!r})",
                )


def _definitions(
    catalog: Catalog,
    resource: StrataResource,
    names: ProjectNames,
    translator: StrataDagsterTranslator,
    python_assets: Sequence[dg.AssetsDefinition],
    stale_sensor_status: dg.DefaultSensorStatus,
    checks: StrataChecks,
) -> dg.Definitions:
    nodes = describe_nodes(catalog)
    whole_keys = _whole_keys(catalog, nodes, translator)
    companions = partition_companions(catalog, nodes, translator)
    unique = {item.key: item for item in companions.values()}
    partitioned = partition_built_models(catalog, nodes, translator)
    reporter = StaleCheckReporter(partitioned)
    assets: list[dg.AssetsDefinition | dg.SourceAsset] = []
    fingerprinted: dict[dg.AssetKey, str] = {}  # observable asset -> the source its version is
    for source in sorted(catalog.project.sources):
        observed = [item for item in unique.values() if item.upstream == source]
        built = build_source_assets(nodes[source], translator, names, observed, reporter)
        assets.extend(built)
        fingerprinted.update((item.key, source) for item in built)
    ref = DefinitionsRef()
    assets.extend(
        model_assets(
            catalog.project.order,
            nodes,
            translator,
            whole_keys,
            companions,
            names,
            reporter,
            lambda: ref.get().resolve_asset_graph(),
        )
    )
    for model, _ in whole_keys.items():
        if model in catalog.project.models:
            assets.append(build_whole_model_asset(nodes[model], translator, names, reporter))
    strata_keys = [key for item in assets for key in _keys(item)]
    assets.extend(python_assets)
    # Partitions companions: observable assets, observed by the builds of their models (or the
    # observations of their sources); in no job, sensor or selection of ours.
    observers = [companion_asset(item, nodes, translator, names, reporter) for item in unique.values()]
    keys = [key for item in assets for key in _keys(item)]
    asset_jobs = build_asset_jobs(assets, names, strata_executor)
    backfill_jobs, backfill_job_of = build_backfill_jobs(
        assets,
        [translator.get_asset_key(nodes[model]) for model in catalog.project.order],
        names,
        strata_executor,
    )
    one_run_jobs = build_one_run_jobs(
        ref,
        asset_jobs.job_of,
        names.observe_job,
        asset_jobs.observable,
        backfill_job_of,
        names,
        strata_executor,
    )
    stale_checks = [stale_partitions_family(partitioned)] if partitioned else []
    jobs = [*one_run_jobs, *asset_jobs.jobs, asset_jobs.observe_job, *checks.jobs, *backfill_jobs]

    def check_range(config: Mapping[str, Any], instance: dg.DagsterInstance) -> None:
        """E068 for a `strata_backfill_range` config its assets do not have (the executor refuses it)."""
        graph = ref.get().resolve_asset_graph()
        backfill_range_waves(graph, backfill_job_of, BackfillRangeConfig(**config), instance)

    guard(
        GuardedProject(resource, names, check_range),
        [*strata_keys, *(key for item in python_assets for key in item.keys)],
        [job.name for job in jobs],
    )
    resources: dict[str, object] = {
        names.resource_key: resource,
        names.io_manager_key: StrataIOManager(strata=resource, name=names.scope),
    }
    if resource.backend_choice.is_duckdb:
        resources[names.duckdb_resource_key] = StrataDuckDBResource(warehouse=resource.warehouse)
    defs = dg.Definitions(
        assets=[*assets, *observers],
        asset_checks=[*checks.asset_checks, *strata_checks_op([*stale_checks, *checks.families], names)],
        jobs=jobs,
        schedules=checks.schedules,
        resources=resources,
        executor=strata_executor,
        sensors=[
            stale_partitions_sensor(
                [*asset_jobs.jobs, asset_jobs.observe_job],
                asset_jobs.job_of,
                {key: fingerprinted.get(key) for key in asset_jobs.observable},
                resource,
                observe_job=names.observe_job,
                name=names.stale_sensor,
                default_status=stale_sensor_status,
                whole_models={
                    key: model for model, key in whole_keys.items() if model in catalog.project.models
                },
                partitioned=partitioned,
                arriving=arriving_sources(catalog, nodes, translator),
            ),
            automation_sensor(dg.AssetSelection.assets(*keys), name=names.automation_sensor),
        ],
    )
    ref.set(defs)
    return defs


def describe_nodes(catalog: Catalog) -> dict[str, StrataAssetProps]:
    """What the translator is asked about, for every source and model of the project."""
    project = catalog.project
    nodes: dict[str, StrataAssetProps] = {}
    for name, source in project.sources.items():
        relation = source.path or source.table_name
        nodes[name] = StrataAssetProps(
            name=name,
            kind="source",
            module=project.module_of(name).path.stem,
            description=source.description,
            partitioned_by=source.partitioned_by,
            bounds=catalog.bounds.get(name),
            relation=relation,
            location=source.location,
            columns=catalog.columns.get(name),
            path=source.path,
            arrives_from=catalog.arrivals.get(name),
            is_integer_keyed=_is_integer_keyed(catalog, name),
        )
    for name in project.order:
        model = project.models[name]
        nodes[name] = StrataAssetProps(
            name=name,
            kind="model",
            module=project.module_of(name).path.stem,
            description=model.properties.description,
            partitioned_by=model.properties.partitioned_by,
            bounds=catalog.bounds.get(name),
            relation=model_relation(name, catalog.branch),
            references=model.references,
            code_version=catalog.fingerprints[name],
            sql=catalog.sql.get(name),
            tags=model.properties.tags,
            refresh=effective_refresh(model),
            volatile_calls=tuple(dict.fromkeys(call.sql for call in volatile_calls(model))),
            owners=model.properties.owners,
            location=model.location,
            columns=catalog.columns.get(name),
            lineage=tuple(catalog.lineage.get(name, {}).items()),
            freshness_seconds=None
            if model.properties.freshness is None
            else model.properties.freshness.seconds,
            arrives_from=catalog.arrivals.get(name),
            iceberg_table=iceberg_table(name, catalog.branch),
        )
    return nodes


def _is_integer_keyed(catalog: Catalog, name: str) -> bool:
    """Whether a business-versioned source's partition column holds integers (not a calendar)."""
    spec = catalog.project.sources[name].partitioned_by
    if name not in catalog.arrivals or spec is None or spec.grain != "key":
        return False
    columns = catalog.columns.get(name)
    types = {column.name: column.type or "" for column in columns.columns} if columns else {}
    return is_ordered_type(types.get(spec.column, "")) and not is_time_type(types.get(spec.column, ""))


def _whole_keys(
    catalog: Catalog, nodes: dict[str, StrataAssetProps], translator: StrataDagsterTranslator
) -> dict[str, dg.AssetKey]:
    """Companions: every partitioned source, and every partitioned model an unpartitioned model reads."""
    project = catalog.project
    keys = {
        name: translator.get_whole_asset_key(nodes[name])
        for name, source in project.sources.items()
        if source.partitioned_by is not None
    }
    for name in project.order:
        if nodes[name].partitioned_by is not None:
            continue
        for ref in project.upstream_models(name):
            if nodes[ref].partitioned_by is not None:
                keys[ref] = translator.get_whole_asset_key(nodes[ref])
    return keys


def partition_built_models(
    catalog: Catalog, nodes: dict[str, StrataAssetProps], translator: StrataDagsterTranslator
) -> dict[dg.AssetKey, PartitionedModel]:
    """The partitioned SQL models whose builds go partition by partition, by asset key: those with
    a `strata_stale_partitions` check, whose stale partitions the engine tells."""
    found = {}
    for name in catalog.project.order:
        props = catalog.project.models[name].properties
        spec = props.partitioned_by
        partitions_def = translator.get_partitions_def(nodes[name])
        if (
            spec is not None
            and partitions_def is not None
            and props.merge_strategy not in INCREMENTAL_STRATEGIES
            and not props.is_view
        ):
            found[translator.get_asset_key(nodes[name])] = PartitionedModel(name, spec.grain, partitions_def)
    return found


def arriving_sources(
    catalog: Catalog, nodes: dict[str, StrataAssetProps], translator: StrataDagsterTranslator
) -> list[ArrivingSource]:
    """The business-versioned sources the stale sensor watches for new partitions, with the models
    cut like each (their partitions follow the source's) and the unpartitioned models reading it."""
    project = catalog.project
    found = []
    for name in sorted(project.sources):
        if catalog.arrivals.get(name) != name:
            continue
        cut_like = {
            translator.get_asset_key(nodes[model]): (model, spec.grain)
            for model in project.order
            if catalog.arrivals.get(model) == name
            and (spec := project.models[model].properties.partitioned_by) is not None
            and project.models[model].properties.merge_strategy not in INCREMENTAL_STRATEGIES
            and not project.models[model].properties.is_view
        }
        readers = tuple(
            translator.get_asset_key(nodes[model])
            for model in project.order
            if name in project.models[model].references
            and project.models[model].properties.partitioned_by is None
        )
        found.append(
            ArrivingSource(
                name,
                translator.get_asset_key(nodes[name]),
                translator.get_whole_asset_key(nodes[name]),
                cut_like,
                readers,
            )
        )
    return found


def _keys(item: dg.AssetsDefinition | dg.SourceAsset) -> list[dg.AssetKey]:
    return [item.key] if isinstance(item, dg.SourceAsset) else list(item.keys)
