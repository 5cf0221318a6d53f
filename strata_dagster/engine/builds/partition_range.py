"""Rebuilding given partitions of partitioned models (`--partitions`, a Dagster partition backfill).

The named partitions are recomputed completely from the model's current inputs into one new
segment that replaces exactly them; every other partition keeps its rows. The new state records
the input fingerprints of the rebuilt partitions and keeps the last build's for the others, so a
partition that changed and was not asked for is still found stale by the next build. Such a state
is not what a build of these inputs gives, so no build key names it. When the rebuilt partitions
hold the rows they held, the current snapshot stays (early cutoff).

Whatever a partition-by-partition build cannot do (a first build, changed model code, another
input every partition reads that changed) falls back to a full build, recorded with its reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from strata_dagster.backends.base import Session
from strata_dagster.engine.builds import joined_inputs
from strata_dagster.engine.builds.incremental import Fallback
from strata_dagster.engine.builds.partition_bounds import model_bounds
from strata_dagster.engine.builds.partitions import (
    PartitionBuild,
    fingerprint_precheck,
    fingerprint_slices,
    joined_change,
    partition_fingerprints,
)
from strata_dagster.engine.context import ProjectContext, with_upstream
from strata_dagster.engine.partition_keys import PartitionRequest, keys_for_model, request_grain
from strata_dagster.errors import E_VERIFY_PARTITIONS, StrataError
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES

# A model outcome's detail key: the partitions the run was asked to rebuild.
REQUESTED_PARTITIONS = "requested_partitions"


def requested_partitions(
    session: Session,
    context: ProjectContext,
    selected: Iterable[str],
    requests: tuple[PartitionRequest, ...],
    today: dt.date,
) -> dict[str, tuple[str, ...]]:
    """The partition keys to rebuild of each selected partitioned model whose grain the requests
    name (days: day models; months: month models). E040 as `partition_keys` says, and for a model
    that builds by merge deltas (it cannot rebuild partition by partition)."""
    by_model = partition_keys(session, context, selected, requests, today)
    for name in by_model:
        model = context.project.models[name]
        if model.properties.merge_strategy in INCREMENTAL_STRATEGIES:
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"model `{name}` builds by `{model.properties.merge_strategy}` deltas, not partition by partition",
                model.location,
                hint=f"rebuild it whole with `strata run PROJECT --models {name} --full-refresh`",
            )
    return by_model


def partition_keys(
    session: Session,
    context: ProjectContext,
    selected: Iterable[str],
    requests: tuple[PartitionRequest, ...],
    today: dt.date,
) -> dict[str, tuple[str, ...]]:
    """The partition keys `requests` name of each selected partitioned model whose grain they
    name (days: day models; months: month models), as `strata run` and `strata verify` take
    them. E040 when no selected model is partitioned, when a request fits no selected model, or
    when a key is not a partition of its model (before its first, in the future beyond its data)."""
    if not requests:
        return {}
    project = context.project
    partitioned = [name for name in selected if project.models[name].properties.partitioned_by is not None]
    if not partitioned:
        raise StrataError(
            E_VERIFY_PARTITIONS,
            "`--partitions` was given but no selected model is partitioned",
            hint="select a partitioned model with --models (e.g. --models daily_revenue), or drop --partitions",
        )
    by_model: dict[str, tuple[str, ...]] = {}
    for name in partitioned:
        model = project.models[name]
        spec = model.properties.partitioned_by
        assert spec is not None
        fitting = tuple(request for request in requests if request.grain == request_grain(spec.grain))
        if not fitting:
            continue
        start = _declared_start(context, name)
        bounds = model_bounds(session, context, name)
        first = start or (bounds.first if bounds else None)
        by_model[name] = keys_for_model(
            name,
            spec.grain,
            fitting,
            first,
            bounds.last if bounds else None,
            today,
            first_is_start=start is not None,
        )
    grains = {name: _grain(context, name) for name in partitioned}
    for request in requests:
        if not any(request.grain == request_grain(grain) for grain in grains.values()):
            name = partitioned[0]
            wanted = request_grain(grains[name])
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"`{request.text}` names {request.grain}s, but no selected model is partitioned by "
                f"{request.grain} (`{name}` is partitioned by {grains[name]})",
                subject=name,
                hint=f"give {wanted}s for `{name}`, e.g. --partitions {'2026-01' if wanted == 'month' else '2026-01-05'}",
            )
    return by_model


def _grain(context: ProjectContext, name: str) -> str:
    spec = context.project.models[name].properties.partitioned_by
    assert spec is not None
    return spec.grain


def _declared_start(context: ProjectContext, name: str) -> dt.date | None:
    """The earliest `start` of the partitioned sources model `name` reads (through its upstream)."""
    project = context.project
    starts = [
        source.start
        for model in with_upstream(project, [name])
        for ref in project.models[model].references
        if (source := project.sources.get(ref)) is not None and isinstance(source.start, dt.date)
    ]
    return min(starts) if starts else None


class ByRequest:
    """A `PartitionBuild`'s change finder for `--partitions`: exactly the partitions `keys`,
    changed or not. The new state holds only these rebuilt (`completes_state` is False): no build
    key names it, and rebuilt partitions holding the rows they held keep the live state.

    Args:
        keys: the partition keys `--partitions` names for this model (engine.partition_keys).

    Returns (from `changed_slices`):
        tuple: `keys`, the facts the new state records (the requested partitions' fingerprints
        now, the others' as the live state recorded them), and how many partitions there are.
    """

    follows_segments = False
    completes_state = False

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def precheck(self, build: PartitionBuild) -> Fallback | None:
        return fingerprint_precheck(build)

    def joined_change(
        self, build: PartitionBuild, changed_inputs: list[str]
    ) -> joined_inputs.JoinedChange | Fallback:
        """A changed joined input reaches partitions beyond the requested ones, and its new figures
        would hide them from the next build: the whole model is rebuilt instead."""
        if changed_inputs:
            return Fallback(f"`{changed_inputs[0]}` changed, and every partition reads it")
        return joined_change(build, changed_inputs)

    def changed_partitions(self, build: PartitionBuild) -> list[str]:
        return sorted(
            self._affected(partition_fingerprints(build.ctx), build.previous.detail["partition_fingerprints"])
        )

    def changed_slices(
        self, build: PartitionBuild, joined: joined_inputs.JoinedChange
    ) -> tuple[list[str], dict[str, Any], int | None]:
        return fingerprint_slices(build, joined, self._affected, self._recorded)

    def _affected(self, now: dict[str, Any], before: dict[str, Any]) -> list[str]:
        return list(self.keys)

    def _recorded(self, now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
        """The fingerprints the new state records: the requested partitions' now, the others' as before."""
        recorded = {key: value for key, value in before.items() if key not in self.keys}
        recorded.update({key: now[key] for key in self.keys if key in now})
        return recorded
