"""`StrataIOManager`: snapshots and views written through the engine; models read back as frames.

- A SQL model's asset hands it a `StrataBuild`: the engine builds the model inside DuckDB (reusing
  a snapshot whose build key exists, keeping the live one when the rows did not change), pins and
  contracts run, and the view is repointed in one transaction. No row crosses into Python.
  The unpartitioned models of a Dagster run share one engine run (orchestration.shared_builds).
- A Python model's asset hands it a polars or pandas DataFrame: the frame becomes a snapshot the
  same way, with the same pins (`strata/unique`, `strata/contract` definition metadata).
- Every materialization carries data_version = the content identity of what the view now shows
  (per partition for partitioned models), so Dagster's staleness follows content, not time.
- A model read by partition (see orchestration.companions) records, with each build, the
  partitions of its companion whose rows changed; a partitioned reader records them too before
  its own partitions, in case the engine rebuilt the model on the way.
- Python consumers load models as polars (default) or pandas (annotate the input
  `pd.DataFrame`) frames; a partitioned consumer gets only the rows of its partitions.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from strata_dagster.compile.relations import model_view
from strata_dagster.engine.business import SOURCE_VERSIONS
from strata_dagster.engine.columns import live_columns
from strata_dagster.engine.explain import build_why
from strata_dagster.engine.frames import FrameRequest, FrameResult, publish_frame
from strata_dagster.engine.partition_keys import as_request_texts
from strata_dagster.engine.partition_status import (
    model_partitions,
    read_model,
    whole_content,
)
from strata_dagster.engine.paths import CUTOFF, REUSED
from strata_dagster.engine.run import ModelOutcome, RunRequest, RunResult
from strata_dagster.errors import E_BUILD, StrataError
from strata_dagster.language import load_project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.backfills import engine_request
from strata_dagster.orchestration.build import StrataBuild
from strata_dagster.orchestration.companions import record_companion
from strata_dagster.orchestration.event_storage import batched_asset_events
from strata_dagster.orchestration.failures import failing_cleanly
from strata_dagster.orchestration.provenance import materialization_tags, refresh_input_version
from strata_dagster.orchestration.resources import StrataResource
from strata_dagster.orchestration.shared_builds import build_alone, build_unpartitioned
from strata_dagster.warehouse.connection import held_open

if TYPE_CHECKING:
    # pandas, polars and pyarrow load when a frame is read or written, not in every run worker: importing
    # them costs seconds of each run's start (see docs/dagster.md, the Dagster path's cost).
    import pandas as pd
    import polars as pl
    import pyarrow as pa

UNVERSIONED = "unversioned"


class StrataIOManager(dg.ConfigurableIOManager):
    """Writes strata models as immutable snapshots behind live views, and reads them as frames."""

    strata: StrataResource = Field(description="The project, warehouse and branch the models live in.")

    # -- writing ----------------------------------------------------------------------------------
    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        with failing_cleanly():
            self._handle_output(context, obj)

    def _handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if isinstance(obj, StrataBuild):
            # The build, its versions, schema and companion open the warehouse about ten times:
            # one open file for all of them (warehouse.connection.held_open).
            with held_open(self.strata.warehouse_path):
                self._publish_build(context, obj)
        elif _is_frame(obj):
            with held_open(self.strata.warehouse_path):
                self._publish_frame(context, obj)
        elif obj is None:
            return  # an asset that returned nothing: nothing to publish
        else:
            raise StrataError(
                E_BUILD,
                f"asset {context.asset_key.to_user_string()} returned a {type(obj).__name__}",
                subject=context.asset_key.to_user_string(),
                hint="a Python model returns a polars or pandas DataFrame",
            )

    def _publish_build(self, context: dg.OutputContext, build: StrataBuild) -> None:
        strata = self.strata
        project = load_project(strata.project_path)
        spec = project.models[build.model].properties.partitioned_by
        partitions = (
            as_request_texts(spec.grain, build.partition_keys) if spec and build.partition_keys else ()
        )
        if build.partition_keys is None:
            built = build_unpartitioned(context, strata, project, build.model)
        else:
            built = build_alone(context, strata, build.model, partitions)
        request, result, state = built.request, built.result, built.state
        outcome = result.outcome(build.model)
        if built.ran_here:
            self._report_side_effects(context, build, result, built.models)
        if outcome.path not in (REUSED, CUTOFF) and state.model_fingerprint != build.code_version:
            context.log.warning(
                f"`{build.model}` changed since Dagster loaded the definitions (fingerprint "
                f"{state.model_fingerprint[:12]}, the definitions say {build.code_version[:12]}): reload the "
                "code location so its code version, and Dagster's staleness, follow the project"
            )
        self._report_drifted_sources(context, build, state.sources, request.overrides)
        metadata = {**_build_metadata(result, outcome, build), **_request_metadata(request)}
        metadata[c.WHY_KEY] = build_why(
            outcome.model, outcome.path, outcome.detail, outcome.rows, spec.grain if spec else None
        )
        schema = _published_schema(strata, build.model, build.column_schema)
        if schema is not None:
            metadata[c.COLUMN_SCHEMA_KEY] = schema
        for refresh in build.companions:
            if record_companion(context, strata, refresh, metadata[c.RUN_ID_KEY]):
                refresh_input_version(context, refresh.asset_key)  # a reader's provenance: the new events
        if build.partition_keys is None:
            context.step_context.set_data_version(context.asset_key, dg.DataVersion(state.content_hash))
            # A view model's rows are not counted: counting would read every row its view exists not to.
            counts = (
                {} if state.is_view else {c.ROWS_KEY: state.row_count, "dagster/row_count": state.row_count}
            )
            context.add_output_metadata({**metadata, **counts})
            return
        contents = model_partitions(
            project, strata.warehouse_path, build.model, build.partition_keys, strata.branch
        )
        # The partitions this engine run recomputed (a partition-complete build says which).
        recomputed = set((getattr(outcome, "detail", None) or {}).get("partitions") or ())
        sql = metadata.pop(c.SQL_KEY)
        # One write for the partitions' events (a year of days: 365), not one each.
        with batched_asset_events(context.step_context.instance):
            for key in build.partition_keys:
                part = contents[key]
                # The model's SQL once per run: on its last event, the one the UI shows as the latest.
                once = {c.SQL_KEY: sql} if key == build.partition_keys[-1] else {}
                context.log_event(
                    dg.AssetMaterialization(
                        asset_key=context.asset_key,
                        partition=key,
                        tags=materialization_tags(
                            context, context.asset_key, part.fingerprint, build.code_version
                        ),
                        metadata={
                            **metadata,
                            c.ROWS_KEY: part.row_count,
                            "dagster/row_count": part.row_count,
                            c.PARTITION_RECOMPUTED_KEY: key in recomputed,
                            **once,
                        },
                    )
                )
            if build.whole_asset_key is not None:
                whole = whole_content(strata.warehouse_path, model_view(build.model, strata.branch))
                context.log_event(
                    dg.AssetObservation(
                        asset_key=build.whole_asset_key,
                        tags={c.DATA_VERSION_TAG: whole.fingerprint},
                        metadata={c.ROWS_KEY: whole.row_count, c.RUN_ID_KEY: metadata[c.RUN_ID_KEY]},
                    )
                )

    def _report_side_effects(
        self, context: dg.OutputContext, build: StrataBuild, result: RunResult, asked: tuple[str, ...]
    ) -> None:
        rebuilt = [
            outcome.model
            for outcome in result.outcomes
            if outcome.model not in asked and outcome.path != REUSED
        ]
        if rebuilt:
            context.log.warning(
                f"building `{build.model}` rebuilt stale upstream model(s) {', '.join(rebuilt)} first, "
                "so that it never reads outdated rows; materialize them in Dagster to record it "
                "(the engine will reuse what it just built)"
            )

    def _report_drifted_sources(
        self,
        context: dg.OutputContext,
        build: StrataBuild,
        consumed: Mapping[str, str],
        overrides: Mapping[str, str],
    ) -> None:
        """A source that changed after Dagster last observed it: record the version the build read,
        so the model's provenance names it and the source's other consumers show stale, as they
        are in the engine. A source a backfill overrides was read from another table: not reported."""
        for item in build.inputs:
            fingerprint = consumed.get(item.name)
            if item.kind != "source" or item.name in overrides:
                continue
            if fingerprint is None or fingerprint == item.data_version:
                continue
            context.log.warning(
                f"source `{item.name}` changed since Dagster last observed it; recording the version "
                f"`{build.model}` was built from"
            )
            context.log_event(
                dg.AssetObservation(asset_key=item.asset_key, tags={c.DATA_VERSION_TAG: fingerprint})
            )
            refresh_input_version(context, item.asset_key)

    def _publish_frame(
        self, context: dg.OutputContext, frame: pl.DataFrame | pd.DataFrame | pa.Table
    ) -> None:
        strata = self.strata
        name = _model_name(context.definition_metadata, context.asset_key)
        dagster_run = context.step_context.dagster_run
        request = engine_request(strata, dagster_run.job_name, dagster_run.tags)
        if context.has_asset_partitions:
            raise StrataError(
                E_BUILD,
                f"Python model `{name}` is partitioned; this version publishes unpartitioned Python models only",
                subject=name,
                hint="drop partitions_def from the Python asset, or write the model in strata",
            )
        metadata = context.definition_metadata
        outcome = publish_frame(
            FrameRequest(
                warehouse=strata.warehouse_path,
                model=name,
                frame=_to_arrow(frame),
                code_version=context.version or UNVERSIONED,
                branch=strata.branch,
                unique=tuple(_raw(metadata.get(c.UNIQUE_KEY)) or ()),
                contract=_contract(_raw(metadata.get(c.CONTRACT_KEY))),
                project_dir=strata.project_path,
            )
        )
        context.step_context.set_data_version(context.asset_key, dg.DataVersion(outcome.content_hash))
        metadata = _frame_metadata(outcome, strata.branch)
        if request.reason:  # corrections concern SQL models; a frame records only why it was built
            metadata[c.REASON_KEY] = request.reason
        schema = _published_schema(strata, name, None)
        if schema is not None:
            metadata[c.COLUMN_SCHEMA_KEY] = schema
        context.add_output_metadata(metadata)

    # -- reading ----------------------------------------------------------------------------------
    def load_input(self, context: dg.InputContext) -> pl.DataFrame | pd.DataFrame:
        with failing_cleanly():
            return self._load_input(context)

    def _load_input(self, context: dg.InputContext) -> pl.DataFrame | pd.DataFrame:
        strata = self.strata
        upstream = context.upstream_output
        name = _model_name(upstream.definition_metadata if upstream else {}, context.asset_key)
        project = load_project(strata.project_path)
        keys = None
        is_partitioned = name in project.models and project.models[name].properties.partitioned_by is not None
        if is_partitioned and context.has_asset_partitions and _is_partitioned_step(context):
            keys = list(context.asset_partition_keys)
        table = read_model(project, strata.warehouse_path, name, keys, strata.branch)
        if _wants_pandas(context):
            return table.to_pandas()
        import polars as pl

        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame


def _is_partitioned_step(context: dg.InputContext) -> bool:
    """Whether the consumer runs for some partitions (then it reads only theirs), not the whole."""
    try:
        return bool(context.has_partition_key or context.has_partition_key_range)
    except dg.DagsterInvariantViolationError:
        return False


_FRAME_TYPES = {"polars": "DataFrame", "pandas": "DataFrame", "pyarrow": "Table"}


def _loaded_frame_type(module: str) -> type | None:
    """`module`'s frame class if the module is loaded: an object or annotation of that type
    implies the module is loaded, so an unloaded one is never imported just to be ruled out."""
    loaded = sys.modules.get(module)
    return None if loaded is None else getattr(loaded, _FRAME_TYPES[module])


def _is_frame(obj: Any) -> bool:
    types = [found for found in map(_loaded_frame_type, _FRAME_TYPES) if found is not None]
    return bool(types) and isinstance(obj, tuple(types))


def _wants_pandas(context: dg.InputContext) -> bool:
    typing_type = context.dagster_type.typing_type
    frame = _loaded_frame_type("pandas")
    return frame is not None and isinstance(typing_type, type) and issubclass(typing_type, frame)


def _model_name(metadata: Mapping[str, Any], key: dg.AssetKey) -> str:
    name = metadata.get(c.MODEL_KEY)
    return str(name) if name else key.path[-1]


def _raw(value: Any) -> Any:
    """A definition metadata value as the user wrote it (Dagster may wrap lists and dicts)."""
    return value.value if isinstance(value, dg.MetadataValue) else value


def _to_arrow(frame: pl.DataFrame | pd.DataFrame | pa.Table) -> pa.Table:
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame
    polars = _loaded_frame_type("polars")
    if polars is not None and isinstance(frame, polars):
        return frame.to_arrow()
    return pa.Table.from_pandas(frame, preserve_index=False)


def _contract(value: Any) -> tuple[tuple[str, str, bool], ...]:
    """`{"order_id": "BIGINT not null", "region": "VARCHAR"}` -> (column, type, is_not_null) rows."""
    if not value:
        return ()
    columns = []
    for column, text in dict(value).items():
        words = str(text).split()
        is_not_null = [word.lower() for word in words[-2:]] == ["not", "null"]
        type_text = " ".join(words[:-2] if is_not_null else words)
        columns.append((str(column), type_text, is_not_null))
    return tuple(columns)


def _build_metadata(result: RunResult, outcome: ModelOutcome, build: StrataBuild) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        c.RUN_ID_KEY: result.run_id or "none: everything was up to date",
        c.SNAPSHOT_KEY: outcome.snapshot_id,
        c.TABLE_KEY: outcome.table_name,
        c.PATH_KEY: outcome.path,
        c.DURATION_KEY: round(outcome.duration_ms, 1),
        c.FINGERPRINT_KEY: build.code_version,
        # The model's query over the live views and source tables, as the user reads it; the
        # statement the engine ran (a delta, partitions) reads internal snapshot tables instead.
        c.SQL_KEY: dg.MetadataValue.md(f"```sql\n{build.sql}\n```"),
    }
    detail = getattr(outcome, "detail", None)
    versions = (detail or {}).get(SOURCE_VERSIONS)
    if versions:
        metadata[c.SOURCE_VERSIONS_KEY] = dg.MetadataValue.json(
            {source: version.get("last_partition") for source, version in versions.items()}
        )
    if detail:
        metadata[c.DETAIL_KEY] = dg.MetadataValue.json(
            {key: value for key, value in detail.items() if key != "segment_sql"}
        )
    return metadata


def _published_schema(
    strata: StrataResource, model: str, declared_schema: dg.TableSchema | None
) -> dg.TableSchema | None:
    """The live view's columns and types as published, with the definition's constraints (`not
    null`, `unique`): what Dagster's column schema change checks compare between materializations."""
    live = live_columns(strata.warehouse_path, model, strata.branch)
    if live is None:
        return None
    declared = {column.name: column for column in (declared_schema.columns if declared_schema else ())}
    columns = [
        dg.TableColumn(
            name,
            kind,
            constraints=declared[name].constraints if name in declared else None,
        )
        for name, kind in live
    ]
    return dg.TableSchema(
        columns=columns, constraints=declared_schema.constraints if declared_schema else None
    )


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


def _frame_metadata(outcome: FrameResult, branch: str) -> dict[str, Any]:
    view = model_view(outcome.model, branch)
    return {
        c.RUN_ID_KEY: outcome.run_id or "none: the live snapshot holds these rows",
        c.SNAPSHOT_KEY: outcome.snapshot_id,
        c.TABLE_KEY: outcome.table_name,
        c.PATH_KEY: outcome.path,
        c.ROWS_KEY: outcome.rows,
        "dagster/row_count": outcome.rows,
        c.DURATION_KEY: round(outcome.duration_ms, 1),
        c.TABLE_NAME_KEY: f"{view.db}.{view.name}",
    }
