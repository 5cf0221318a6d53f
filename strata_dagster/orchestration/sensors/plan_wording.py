"""Why the stale sensor rebuilds an asset, in the engine's words: `strata plan`'s line for its model
(what changed, old and new fingerprints, the path the run would take, window, partitions)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import dagster as dg

from strata_dagster.engine.plan import plan
from strata_dagster.engine.run import RunRequest
from strata_dagster.language import load_project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.resources.strata import StrataResource


def model_of(asset_graph, key: dg.AssetKey) -> str | None:  # type: ignore[no-untyped-def]  # Dagster's asset graph and node types are private
    """The strata model an asset builds (its `strata/model` metadata), if any."""
    value = asset_graph.get(key).metadata.get(c.MODEL_KEY)
    value = getattr(value, "value", value)
    return str(value) if value else None


def engine_why(
    strata: StrataResource,
    asset_graph: Any,  # Dagster's asset graph and node types are private
    keys: Iterable[dg.AssetKey],
    timeout: float,
) -> dict[dg.AssetKey, str]:
    """Asset -> the plan's line for its model, read-only (waiting at most `timeout` seconds for a
    writer's lock: E021 after that, which the caller reports). Assets of no SQL model (a Python
    model's, which only Dagster builds; one of yours) are left out: Dagster's causes say why."""
    sql_models = set(load_project(strata.project_path).models)
    models = {key: name for key in keys if (name := model_of(asset_graph, key)) in sql_models}
    if not models:
        return {}
    request = RunRequest(
        project_dir=strata.project_path,
        warehouse=strata.warehouse_path,
        models=tuple(sorted(set(models.values()))),
        branch=strata.branch,
        only_stale=True,
    )
    planned = {model.model: model for model in plan(request, timeout=timeout).models}
    return {key: planned[name].text() for key, name in models.items() if name in planned}
