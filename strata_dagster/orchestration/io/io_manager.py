"""`StrataIOManager`: Python models' frames written as snapshots behind live views; models read
back as frames.

- A Python model's asset hands it a polars or pandas DataFrame (or a pyarrow Table): the frame
  becomes an immutable snapshot and the model's view is repointed to it in one transaction, with
  the same pins as a SQL model (`strata/unique`, `strata/contract` definition metadata). Its data
  version is the frame's content, given on the asset's output (`strata_python_model` computes it
  before the write), so Dagster's staleness follows content, not time.
- SQL models are written by their assets' step (assets.models): one engine run per selection.
  Their assets name this IO manager so that Python consumers load them through it.
- Python consumers load models as polars (default) or pandas (annotate the input `pd.DataFrame`)
  frames; a partitioned consumer gets only the rows of its partitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field, PrivateAttr

from strata_dagster.backends.duckdb.connection import held_open
from strata_dagster.compile.relations import model_view
from strata_dagster.engine.commands.frames import FrameRequest, FrameResult, publish_frame
from strata_dagster.engine.reads.partition_status import read_model
from strata_dagster.errors import E_BUILD, StrataError
from strata_dagster.language import load_project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.models import published_schema
from strata_dagster.orchestration.failures import failing_cleanly
from strata_dagster.orchestration.io.frames import (
    is_frame,
    loaded_frame_type,
    model_name,
    parse_contract,
    raw,
    to_arrow,
)
from strata_dagster.orchestration.jobs.backfills import engine_request
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    import pyarrow as pa

UNVERSIONED = "unversioned"


class StrataIOManager(dg.ConfigurableIOManager):
    """Writes Python models as immutable snapshots behind live views, and reads models as frames."""

    strata: StrataResource = Field(description="The project, warehouse and branch the models live in.")
    name: str | None = Field(
        default=None, description="The project's name in the code location (orchestration.naming)."
    )
    _run: dg.DagsterRun | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # The run's job and tags: a backfill needs a reason, and a frame records it.
        self._run = context.run

    # -- writing ----------------------------------------------------------------------------------
    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        with failing_cleanly():
            self._handle_output(context, obj)

    def _handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if is_frame(obj):
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

    def _publish_frame(
        self, context: dg.OutputContext, frame: pl.DataFrame | pd.DataFrame | pa.Table
    ) -> None:
        strata = self.strata
        name = model_name(context.definition_metadata, context.asset_key)
        job_name, tags = (
            (self._run.job_name, self._run.tags) if self._run is not None else (context.job_name, {})
        )
        request = engine_request(strata, ProjectNames(self.name), job_name, tags)
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
                frame=to_arrow(frame),
                code_version=context.version or UNVERSIONED,
                branch=strata.branch,
                unique=tuple(raw(metadata.get(c.UNIQUE_KEY)) or ()),
                contract=parse_contract(raw(metadata.get(c.CONTRACT_KEY))),
                project_dir=strata.project_path,
            )
        )
        published = _frame_metadata(outcome, strata.branch)
        if request.reason:  # corrections concern SQL models; a frame records only why it was built
            published[c.REASON_KEY] = request.reason
        schema = published_schema(strata, name, None)
        if schema is not None:
            published[c.COLUMN_SCHEMA_KEY] = schema
        context.add_output_metadata(published)

    # -- reading ----------------------------------------------------------------------------------
    def load_input(self, context: dg.InputContext) -> pl.DataFrame | pd.DataFrame:
        with failing_cleanly():
            return self._load_input(context)

    def _load_input(self, context: dg.InputContext) -> pl.DataFrame | pd.DataFrame:
        strata = self.strata
        upstream = context.upstream_output
        name = model_name(upstream.definition_metadata if upstream else {}, context.asset_key)
        project = load_project(strata.project_path)
        is_partitioned = name in project.models and project.models[name].properties.partitioned_by is not None
        keys = _some_partitions(context) if is_partitioned else None
        table = read_model(project, strata.warehouse_path, name, keys, strata.branch)
        if _wants_pandas(context):
            return table.to_pandas()
        import polars as pl

        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame


def _some_partitions(context: dg.InputContext) -> list[str] | None:
    """The input's partitions the consumer reads when they are some of them (a partition, a range);
    None when it reads every partition (an unpartitioned consumer): the whole model is read."""
    if not context.has_asset_partitions:
        return None
    keys = list(context.asset_partition_keys)
    with dg.partition_loading_context(dynamic_partitions_store=context.instance):
        every = context.asset_partitions_def.get_partition_keys()
    return None if set(keys) >= set(every) else keys


def _wants_pandas(context: dg.InputContext) -> bool:
    typing_type = context.dagster_type.typing_type
    frame = loaded_frame_type("pandas")
    return frame is not None and isinstance(typing_type, type) and issubclass(typing_type, frame)


def _frame_metadata(outcome: FrameResult, branch: str) -> dict[str, Any]:
    view = model_view(outcome.model, branch)
    return {
        c.RUN_ID_KEY: outcome.run_id or "none: the live snapshot holds these rows",
        c.SNAPSHOT_KEY: outcome.snapshot_id,
        c.TABLE_KEY: outcome.table_name,
        c.PATH_KEY: outcome.path,
        c.ROWS_KEY: outcome.rows,
        c.ROW_COUNT_KEY: outcome.rows,
        c.DURATION_KEY: round(outcome.duration_ms, 1),
        c.TABLE_NAME_KEY: f"{view.db}.{view.name}",
    }
