"""SQL models as assets: one subsettable `multi_asset` per partitioning (the unpartitioned models,
each daily or monthly partitioning), as dagster-dbt and dagster-sling batch a selection into one
engine invocation.

A step builds the models Dagster selected of its partitioning in one engine run: the engine writes
their immutable snapshots, checks their pins and repoints their views in one transaction; no row
crosses into Python. The step then reports each model, upstream first: an unpartitioned model's
`MaterializeResult` carries its data version = the content identity of what its view now shows,
with the provenance Dagster's staleness reads as tags (assets.provenance: read after the step's own
events, which Dagster's cache of the inputs would miss); so does a run of one partition's. In a
ranged run a partitioned model's result is Dagster's event per partition of the run, and then the
step logs one materialization per partition with its own data version (its content) and
provenance: no output can give the partitions of one run different versions, and these later
events are what staleness reads. A Python model or another
asset that reads one model of a partitioning and feeds another splits the op into steps around it
(Dagster does that for a subsettable multi-asset), so every model reads what is upstream of it.

When the engine run fails, the step builds its models one by one, upstream first (a model reading
a failed one is not built), logs what was built, then fails with the first failure: each failure
is reported in the message of the model that causes it, and nothing of a failed model is published.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from strata_dagster.backends.duckdb.connection import held_open
from strata_dagster.compile.relations import model_view
from strata_dagster.engine.commands.backfill import run_backfill_request
from strata_dagster.engine.partition_keys import as_request_texts
from strata_dagster.engine.paths import CUTOFF, REUSED
from strata_dagster.engine.reads.columns import live_columns
from strata_dagster.engine.reads.explain import build_why
from strata_dagster.engine.reads.partition_status import model_partitions, published_state, whole_content
from strata_dagster.engine.run import ModelOutcome, RunRequest, RunResult
from strata_dagster.engine.sources.business import SOURCE_VERSIONS
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.catch_up import catch_up
from strata_dagster.orchestration.assets.companions import PartitionCompanion, companion_observations
from strata_dagster.orchestration.assets.provenance import (
    ModelInput,
    input_tags,
    latest_record,
    materialization_tags,
    recorded_data_version,
)
from strata_dagster.orchestration.checks.stale_partitions import StaleCheckReporter
from strata_dagster.orchestration.failures import as_failure, fails_cleanly
from strata_dagster.orchestration.jobs.backfills import backfill_tags_help, engine_request, fast_paths_help
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

UNPARTITIONED = "unpartitioned"
VERSIONS_FOLLOW = "this run's next materialization of the partition carries its content version"


@dataclass(frozen=True)
class ModelPlan:
    """What a model's step needs to build it and log its events."""

    name: str
    key: dg.AssetKey
    code_version: str
    sql: str
    references: tuple[str, ...]  # the sources and models it reads, by name
    inputs: tuple[ModelInput, ...]  # the assets it depends on (its provenance)
    sources: tuple[tuple[str, dg.AssetKey], ...]  # unpartitioned sources it reads, by asset
    whole_key: dg.AssetKey | None = None  # the companion carrying the whole model's version
    # The partitions companions of the model (an unpartitioned model read by partition) or of its
    # `from` (a partitioned model): their changed partitions are observed with each build.
    companions: tuple[PartitionCompanion, ...] = ()
    column_schema: dg.TableSchema | None = None  # the definition's: its constraints carry over
    lineage: dg.TableColumnLineage | None = None


def model_assets(
    order: Sequence[str],
    nodes: Mapping[str, StrataAssetProps],
    translator: StrataDagsterTranslator,
    whole_keys: Mapping[str, dg.AssetKey],
    companions: Mapping[str, PartitionCompanion],
    names: ProjectNames,
    reporter: StaleCheckReporter | None = None,
    asset_graph: Callable[[], Any] | None = None,
) -> list[dg.AssetsDefinition]:
    """One multi-asset per partitions definition of the models `order` names (in build order):
    `nodes` describes every source and model by name, `whole_keys` the companion of each
    partitioned node that has an unpartitioned consumer, and `companions` the partitions companion
    each partitioned model reads its `from` model through. `reporter`: the stale-partitions checks
    every step re-evaluates after its builds. `asset_graph`: the whole definitions' asset graph
    (a run's job holds only its selection), to record what a step's engine run built beyond it."""
    reporter = reporter or StaleCheckReporter()
    groups: dict[str, list[tuple[dg.AssetSpec, ModelPlan]]] = {}
    partitions: dict[str, dg.PartitionsDefinition | None] = {}
    labels: dict[str, str] = {}
    for name in order:
        props = nodes[name]
        partitions_def = translator.get_partitions_def(props)
        identity = "" if partitions_def is None else repr(partitions_def)
        spec, plan = _model(props, nodes, translator, whole_keys, companions, names, partitions_def)
        groups.setdefault(identity, []).append((spec, plan))
        partitions.setdefault(identity, partitions_def)
        labels.setdefault(identity, UNPARTITIONED if partitions_def is None else name)
    return [
        _models_asset(names, labels[identity], partitions[identity], members, reporter, asset_graph)
        for identity, members in groups.items()
    ]


def _model(
    props: StrataAssetProps,
    nodes: Mapping[str, StrataAssetProps],
    translator: StrataDagsterTranslator,
    whole_keys: Mapping[str, dg.AssetKey],
    companions: Mapping[str, PartitionCompanion],
    names: ProjectNames,
    partitions_def: dg.PartitionsDefinition | None,
) -> tuple[dg.AssetSpec, ModelPlan]:
    name = props.name
    key = translator.get_asset_key(props)
    # The companions to refresh: this model's (it is read by partition), or the one this model
    # reads its `from` through (the engine may rebuild that model on the way).
    refreshed = list({item.key: item for item in companions.values() if item.upstream == name}.values())
    reads_through = companions.get(name)
    if reads_through is not None:
        refreshed.append(reads_through)
    deps: list[dg.AssetDep] = []
    inputs: list[ModelInput] = []
    sources: list[tuple[str, dg.AssetKey]] = []
    for ref in props.references:
        upstream = nodes[ref]
        upstream_key = translator.get_asset_key(upstream)
        if reads_through is not None and ref == reads_through.upstream:
            # Staleness per partition: through the companion, which keeps `ref` in the lineage.
            deps.append(dg.AssetDep(reads_through.key))
            inputs.append(ModelInput(reads_through.key, is_observed=True))
        else:
            deps.append(
                dg.AssetDep(upstream_key, partition_mapping=translator.get_partition_mapping(props, upstream))
            )
            inputs.append(ModelInput(upstream_key, is_observed=upstream.kind == "source"))
        if upstream.partitioned_by is None and upstream.kind == "source":
            sources.append((ref, upstream_key))
        elif partitions_def is None and ref in whole_keys:
            # Dagster does not carry staleness from a partitioned asset to an unpartitioned one:
            # the companion's single data version does.
            deps.append(dg.AssetDep(whole_keys[ref]))
            inputs.append(ModelInput(whole_keys[ref], is_observed=True))
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
    description = translator.get_description(props)
    if partitions_def is not None:
        notes = [description] if description else []
        description = "\n\n".join([*notes, backfill_tags_help(names), fast_paths_help(names)])
    spec = dg.AssetSpec(
        key=key,
        deps=deps,
        code_version=props.code_version or "",
        description=description,
        group_name=translator.get_group_name(props),
        metadata=metadata,
        tags=dict(translator.get_tags(props)),
        owners=list(translator.get_owners(props)),
        kinds=translator.get_kinds(props),
        automation_condition=translator.get_automation_condition(props),
        freshness_policy=translator.get_freshness_policy(props),
        partitions_def=partitions_def,
        skippable=True,  # a step logs the materializations of what it built, not outputs
    ).with_io_manager_key(names.io_manager_key)  # Python consumers load it as a frame
    plan = ModelPlan(
        name=name,
        key=key,
        code_version=props.code_version or "",
        sql=props.sql or "",
        references=props.references,
        inputs=tuple(inputs),
        sources=tuple(sources),
        whole_key=whole_keys.get(name),
        companions=tuple(refreshed),
        column_schema=column_schema,
        lineage=lineage,
    )
    return spec, plan


def _models_asset(
    names: ProjectNames,
    label: str,
    partitions_def: dg.PartitionsDefinition | None,
    members: Sequence[tuple[dg.AssetSpec, ModelPlan]],
    reporter: StaleCheckReporter,
    asset_graph: Callable[[], Any] | None,
) -> dg.AssetsDefinition:
    plans = [plan for _, plan in members]
    resource_key = names.resource_key
    kind = "unpartitioned" if partitions_def is None else f"`{label}`'s partitioning"

    @dg.multi_asset(
        name=names.models_op(label),
        specs=[spec for spec, _ in members],
        can_subset=True,
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run() if partitions_def is not None else None,
        required_resource_keys={resource_key},
        pool=c.DUCKDB_POOL,
        description=f"Builds the selected strata models ({kind}) in one engine run.",
    )
    @fails_cleanly
    def _models(context: dg.AssetExecutionContext) -> Iterator[Any]:
        strata: StrataResource = getattr(context.resources, resource_key)
        selected = [plan for plan in plans if plan.key in context.selected_asset_keys]
        partition_keys = tuple(context.partition_keys) if partitions_def is not None else None
        # The build, its versions, schemas and companions open the warehouse many times: one open
        # file for all of them (backends.duckdb.connection.held_open).
        with held_open(strata.warehouse_path):
            graph = asset_graph() if asset_graph is not None else context.job_def.asset_layer.asset_graph
            yield from ModelsStep(context, strata, names, partition_keys, graph).build(selected)
            if selected:
                reporter.log_changed(context, strata)

    return _models


class ModelsStep:
    """One step's builds and the events it logs for them."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        strata: StrataResource,
        names: ProjectNames,
        partition_keys: tuple[str, ...] | None,
        asset_graph: Any,
    ) -> None:
        self.context = context
        self.asset_graph = asset_graph
        self.strata = strata
        self.names = names
        self.partition_keys = partition_keys
        self.project = load_project(strata.project_path)

    def build(self, selected: Sequence[ModelPlan]) -> Iterator[Any]:
        if not selected:  # nothing of this partitioning selected: no engine run (it would build all)
            return
        instance = self.context.instance
        # The source versions Dagster knew when the step started: a build that read another one
        # records it (`_drifted`).
        known = {
            key: recorded_data_version(latest_record(instance, ModelInput(key, is_observed=True)))
            for plan in selected
            for _, key in plan.sources
        }
        try:
            request, result = self._run([plan.name for plan in selected])
        except StrataError as error:
            if len(selected) == 1:
                raise
            self.context.log.warning(
                f"the engine run of {len(selected)} models failed ({error.code}): building them one by one"
            )
            yield from self._one_by_one(selected, known)
            return
        asked = [plan.name for plan in selected]
        # Upstream models the engine rebuilt on the way (so that nothing reads outdated rows):
        # recorded first, as the CLI's builds are (assets.catch_up).
        yield from self._catch_up(
            result, {outcome.model for outcome in result.outcomes if outcome.model not in asked}
        )
        for plan in selected:
            yield from self._events(plan, request, result, asked, known)
        if self.partition_keys is not None:
            # An ordinary run builds every stale partition of its models, not only the run's own.
            outside = {
                outcome.model
                for outcome in result.outcomes
                if outcome.model in asked and _detail_partitions(outcome) - set(self.partition_keys)
            }
            yield from self._catch_up(result, outside)

    def _catch_up(self, result: RunResult, models: set[str]) -> Iterator[Any]:
        """The events Dagster lacks for what the engine run built or published again (an earlier
        snapshot reused after a rollback) of `models` beyond this step's own."""
        built = {
            outcome.model for outcome in result.outcomes if outcome.path != REUSED or outcome.is_published
        } & models
        if not built:
            return
        yield from catch_up(
            self.context.instance,
            self.strata,
            self.asset_graph,
            models=built,
            description=f"built by strata run {(result.run_id or '-')[:12]} in this step, beyond its own selection",
            metadata={c.RUN_ID_KEY: result.run_id or ""},
        )

    def _one_by_one(
        self, selected: Sequence[ModelPlan], known: Mapping[dg.AssetKey, str | None]
    ) -> Iterator[Any]:
        failures: list[StrataError] = []
        failed: set[str] = set()
        for plan in selected:
            blocked = failed.intersection(plan.references)
            if blocked:
                failed.add(plan.name)
                self.context.log.warning(f"`{plan.name}` not built: it reads {', '.join(sorted(blocked))}")
                continue
            try:
                request, result = self._run([plan.name])
            except StrataError as error:
                failed.add(plan.name)
                failures.append(error)
                continue
            yield from self._events(plan, request, result, [plan.name], known)
        if failures:
            raise as_failure(failures[0])

    def _run(self, models: Sequence[str]) -> tuple[RunRequest, RunResult]:
        dagster_run = self.context.run
        partitions: tuple[str, ...] = ()
        if self.partition_keys is not None:
            spec = self.project.models[models[0]].properties.partitioned_by
            assert spec is not None
            partitions = tuple(as_request_texts(spec.grain, self.partition_keys))
        request = engine_request(
            self.strata, self.names, dagster_run.job_name, dagster_run.tags, tuple(models), partitions
        )
        return request, run_backfill_request(request)

    # -- events ---------------------------------------------------------------------------------
    def _events(
        self,
        plan: ModelPlan,
        request: RunRequest,
        result: RunResult,
        asked: Sequence[str],
        known: Mapping[dg.AssetKey, str | None],
    ) -> Iterator[Any]:
        strata, context = self.strata, self.context
        outcome = result.outcome(plan.name)
        state = published_state(strata.warehouse_path, outcome.snapshot_id, result.entry)
        if plan.name == asked[0]:
            self._report_side_effects(plan, result, asked)
        if outcome.path not in (REUSED, CUTOFF) and state.model_fingerprint != plan.code_version:
            context.log.warning(
                f"`{plan.name}` changed since Dagster loaded the definitions (fingerprint "
                f"{state.model_fingerprint[:12]}, the definitions say {plan.code_version[:12]}): reload "
                "the code location so its code version, and Dagster's staleness, follow the project"
            )
        yield from self._drifted(plan, state.sources, request.overrides, known)
        spec = self.project.models[plan.name].properties.partitioned_by
        metadata = {**_build_metadata(result, outcome, plan, state.built_by), **_request_metadata(request)}
        metadata[c.WHY_KEY] = build_why(
            outcome.model, outcome.path, outcome.detail, outcome.rows, spec.grain if spec else None
        )
        schema = published_schema(strata, plan.name, plan.column_schema)
        if schema is not None:
            metadata[c.COLUMN_SCHEMA_KEY] = schema
        if plan.lineage is not None:
            metadata[c.COLUMN_LINEAGE_KEY] = plan.lineage
        for companion in plan.companions:
            yield from companion_observations(
                context.instance, strata, companion.refresh(), metadata.get(c.RUN_ID_KEY)
            )
        # Read after the events above are stored: the step's own observations and builds count.
        provenance = input_tags(context.instance, plan.inputs)
        run_tags = context.run.tags
        if self.partition_keys is None:
            # A view model's rows are not counted: counting would read every row its view exists not to.
            counts = {} if state.is_view else {c.ROWS_KEY: state.row_count, c.ROW_COUNT_KEY: state.row_count}
            yield dg.MaterializeResult(
                asset_key=plan.key,
                data_version=dg.DataVersion(state.content_hash),
                tags=materialization_tags(provenance, state.content_hash, plan.code_version, run_tags),
                metadata={**metadata, **counts},
            )
            return
        keys = self.partition_keys
        contents = model_partitions(self.project, strata.warehouse_path, plan.name, keys, strata.branch)
        # The partitions this engine run recomputed (a partition-complete build says which).
        recomputed = _detail_partitions(outcome)
        # The model's SQL and lineage once per run: on its last event, the one the UI shows as the latest.
        once: dict[str, Any] = {
            name: metadata.pop(name) for name in (c.SQL_KEY, c.COLUMN_LINEAGE_KEY) if name in metadata
        }

        def partition_metadata(key: str) -> dict[str, Any]:
            part = contents[key]
            return {
                **metadata,
                c.ROWS_KEY: part.row_count,
                # Dagster's keys: the partition's rows, and the table's (what the overview shows).
                c.PARTITION_ROW_COUNT_KEY: part.row_count,
                c.ROW_COUNT_KEY: state.row_count,
                c.PARTITION_RECOMPUTED_KEY: key in recomputed,
                **(once if key == keys[-1] else {}),
            }

        if len(keys) == 1:  # the output's one event is the partition's, with its own version
            (key,) = keys
            yield dg.MaterializeResult(
                asset_key=plan.key,
                data_version=dg.DataVersion(contents[key].fingerprint),
                tags=materialization_tags(provenance, contents[key].fingerprint, plan.code_version, run_tags),
                metadata=partition_metadata(key),
            )
        else:
            # The output (steps after this one wait for it), with Dagster's event per partition;
            # the partitions' own versions follow.
            yield dg.MaterializeResult(
                asset_key=plan.key,
                metadata={
                    **{key: metadata[key] for key in (c.RUN_ID_KEY, c.BUILT_BY_RUN_KEY) if key in metadata},
                    **_request_metadata(request),
                    c.VERSIONS_FOLLOW_KEY: VERSIONS_FOLLOW,
                },
            )
            for key in keys:
                yield dg.AssetMaterialization(
                    asset_key=plan.key,
                    partition=key,
                    tags=materialization_tags(
                        provenance, contents[key].fingerprint, plan.code_version, run_tags
                    ),
                    metadata=partition_metadata(key),
                )
        if plan.whole_key is not None:
            whole = whole_content(strata.warehouse_path, model_view(plan.name, strata.branch))
            yield dg.AssetObservation(
                asset_key=plan.whole_key,
                tags={c.DATA_VERSION_TAG: whole.fingerprint},
                metadata={
                    c.ROWS_KEY: whole.row_count,
                    **{key: metadata[key] for key in (c.RUN_ID_KEY, c.BUILT_BY_RUN_KEY) if key in metadata},
                },
            )

    def _report_side_effects(self, plan: ModelPlan, result: RunResult, asked: Sequence[str]) -> None:
        rebuilt = [
            outcome.model
            for outcome in result.outcomes
            if outcome.model not in asked and outcome.path != REUSED
        ]
        if rebuilt:
            self.context.log.warning(
                f"building `{', '.join(asked)}` rebuilt stale upstream model(s) {', '.join(rebuilt)} first, "
                "so that it never reads outdated rows; their materializations are recorded with this step's"
            )

    def _drifted(
        self,
        plan: ModelPlan,
        consumed: Mapping[str, str],
        overrides: Mapping[str, str],
        known: Mapping[dg.AssetKey, str | None],
    ) -> Iterator[dg.AssetObservation]:
        """A source that changed after Dagster last observed it: record the version the build read,
        so the model's provenance names it and the source's other consumers show stale, as they
        are in the engine. A source a backfill overrides was read from another table: not reported."""
        for name, key in plan.sources:
            fingerprint = consumed.get(name)
            if name in overrides or fingerprint is None or fingerprint == known.get(key):
                continue
            self.context.log.warning(
                f"source `{name}` changed since Dagster last observed it; recording the version "
                f"`{plan.name}` was built from"
            )
            yield dg.AssetObservation(asset_key=key, tags={c.DATA_VERSION_TAG: fingerprint})
            known = {**known, key: fingerprint}


def _detail_partitions(outcome: ModelOutcome) -> set[str]:
    """The partitions an outcome's detail names (none when it names none)."""
    named = (outcome.detail or {}).get("partitions") or ()
    if not isinstance(named, Iterable):  # the engine records them as a list
        raise TypeError(f"'{type(named).__name__}' object is not iterable")
    return set(named)


def _build_metadata(
    result: RunResult, outcome: ModelOutcome, plan: ModelPlan, built_by: str | None
) -> dict[str, Any]:
    """`built_by`: the strata run that built the reused snapshot, when the engine ran nothing."""
    metadata: dict[str, Any] = {
        # A step whose engine run built nothing has no run of its own: the snapshot's builder.
        **({c.RUN_ID_KEY: result.run_id} if result.run_id else {c.BUILT_BY_RUN_KEY: built_by or "unknown"}),
        c.SNAPSHOT_KEY: outcome.snapshot_id,
        c.TABLE_KEY: outcome.table_name,
        c.PATH_KEY: outcome.path,
        c.DURATION_KEY: round(outcome.duration_ms, 1),
        c.FINGERPRINT_KEY: plan.code_version,
        # The model's query over the live views and source tables, as the user reads it; the
        # statement the engine ran (a delta, partitions) reads internal snapshot tables instead.
        c.SQL_KEY: dg.MetadataValue.md(f"```sql\n{plan.sql}\n```"),
    }
    if result.iceberg is not None and result.iceberg.snapshots.get(outcome.model) is not None:
        metadata[c.ICEBERG_SNAPSHOT_KEY] = str(result.iceberg.snapshots[outcome.model])
    detail = outcome.detail
    versions = (detail or {}).get(SOURCE_VERSIONS)
    if versions:
        metadata[c.SOURCE_VERSIONS_KEY] = dg.MetadataValue.json(
            {source: version.get("last_partition") for source, version in versions.items()}  # type: ignore[attr-defined]  # each source version recorded is a dict
        )
    if detail:
        metadata[c.DETAIL_KEY] = dg.MetadataValue.json(
            {key: value for key, value in detail.items() if key != "segment_sql"}
        )
    return metadata


def _request_metadata(request: RunRequest) -> dict[str, Any]:
    """How the engine was asked to build: a backfill's reason, the run it corrects, its overrides."""
    metadata: dict[str, Any] = {c.KIND_KEY: request.kind}
    if request.reason:
        metadata[c.REASON_KEY] = request.reason
    if request.backfill_of:
        metadata[c.BACKFILL_OF_KEY] = request.backfill_of
    if request.overrides:
        metadata[c.OVERRIDES_KEY] = dg.MetadataValue.json(dict(request.overrides))
    if request.full_refresh:
        metadata[c.FULL_REFRESH_KEY] = True
    return metadata


def published_schema(
    strata: StrataResource, model: str, declared_schema: dg.TableSchema | None
) -> dg.TableSchema | None:
    """The live view's columns and types as published, with the definition's constraints (`not
    null`, `unique`): what Dagster's column schema change checks compare between materializations."""
    live = live_columns(strata.warehouse_path, model, strata.branch)
    if live is None:
        return None
    declared = {column.name: column for column in (declared_schema.columns if declared_schema else ())}
    columns = [
        dg.TableColumn(name, kind, constraints=declared[name].constraints if name in declared else None)
        for name, kind in live
    ]
    return dg.TableSchema(
        columns=columns, constraints=declared_schema.constraints if declared_schema else None
    )
