"""Which partitions of each partitioned model a build would recompute now: the engine's own answer,
read in one grouped scan per model instead of asking an orchestrator partition by partition.

A partition-complete build (engine.builds.partitions) compares its `from` input's rows per partition
(row count and row-hash sum, before any filter) with the figures its last build recorded; a
partition whose figures differ is recomputed. The same comparison, without building, is the
model's stale partitions. Every partition is stale when the model's code changed or another input
(a joined relation) holds other content than the last build read: the build then recomputes more
than the changed days, and an orchestrator marks them all stale too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, model_view
from strata_dagster.engine.builds.partitions import (
    NULL_PARTITION,
    STRATEGY,
    locality_problem_of,
    partition_grain,
    raw_partition_of,
)
from strata_dagster.engine.context import ProjectContext, load_context
from strata_dagster.engine.sources import business
from strata_dagster.engine.sources.business import BusinessReading
from strata_dagster.engine.sources.readings import fingerprint_models, read_source_state, source_basis
from strata_dagster.errors import StrataError
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES
from strata_dagster.sql.content import WHOLE_ROW


@dataclass(frozen=True)
class StalePartitions:
    """The partitions of `model` whose build is out of date, and why. `is_all`: every partition
    (the keys are then those the last build knew)."""

    model: str
    keys: tuple[str, ...]
    reason: str
    is_all: bool = False


def stale_partitions(
    project_dir: Path | str,
    warehouse: Path | str,
    branch: str = DEFAULT_BRANCH,
    *,
    timeout: float | None = None,
) -> dict[str, StalePartitions]:
    """Each partitioned model built by partitions on `branch` and what is stale in it (an empty
    `keys`: nothing). Models never published, incremental, or whose partitions read other
    partitions' rows (the engine rebuilds them whole) or that read a view model are left out: the
    caller asks elsewhere.
    Read-only; waits at most `timeout` seconds for a writer's lock (E021 after that)."""
    with open_session(Path(warehouse), read_only=True, timeout=timeout) as session:
        context = load_context(session, Path(project_dir), {}, branch)
        return _read(session, context)


def cut_like_stale(
    session: Session, context: ProjectContext, source: str, reading: BusinessReading
) -> dict[str, tuple[str, ...] | None]:
    """The partitioned models cut like business-versioned `source` (engine.sources.business.is_cut_like_source)
    and the partitions a build of each recomputes now, from `reading`'s evidence (None: a model
    never built by partitions)."""
    project = context.project
    if reading.is_sliding:
        return {}  # the window's models are built in full or from the weighted delta, not by partition
    names = [
        name
        for name in project.order
        if context.compiled.models[name].base_relation == source
        and business.is_cut_like_source(
            project.models[name], context.compiled.models[name], project.sources[source]
        )
    ]
    found = _read(session, context, names, {source: reading})
    return {name: found[name].keys if name in found else None for name in names}


def _read(
    session: Session,
    context: ProjectContext,
    names: list[str] | None = None,
    readings: dict[str, BusinessReading] | None = None,
) -> dict[str, StalePartitions]:
    project = context.project
    readings = {} if readings is None else readings
    candidates = [
        name
        for name in (project.order if names is None else names)
        if (props := project.models[name].properties).partitioned_by is not None
        and props.merge_strategy not in INCREMENTAL_STRATEGIES
        and not props.is_view
        and locality_problem_of(project.models[name], context.compiled.models[name]) is None
        and not _reads_a_view(context, name)
    ]
    if not candidates or not session.has_history():
        return {}  # no partitioned model, or a warehouse nothing was ever built in
    fingerprints = fingerprint_models(context)
    pointers = session.history.pointers(context.branch)
    heads = {
        name: session.history.with_kept_facts(head, context.branch)
        for name, ids in pointers.items()
        if ids and (head := session.history.snapshot(ids[-1])) is not None
    }
    identities: dict[str, str] = {}

    def identity(ref: str) -> str | None:
        if ref not in identities:
            if ref in project.sources:
                identities[ref] = read_source_state(session, context, ref).fingerprint
            else:
                head = heads.get(ref)
                identities[ref] = "" if head is None else head.content_hash
        return identities[ref] or None

    found: dict[str, StalePartitions] = {}
    for name in candidates:
        head = heads.get(name)
        if head is None:
            continue
        detail: dict[str, Any] = head.detail or {}
        recorded = detail.get("partition_fingerprints")
        if detail.get("strategy") != STRATEGY or recorded is None:
            continue
        keys = tuple(sorted(key for key in recorded if key != NULL_PARTITION))
        if head.model_fingerprint != fingerprints[name].value:
            found[name] = StalePartitions(name, keys, "its code changed", is_all=True)
            continue
        compiled = context.compiled.models[name]
        base = compiled.base_relation
        others = detail.get("other_inputs", {})
        changed = sorted(
            ref for ref in project.models[name].references if ref != base and others.get(ref) != identity(ref)
        )
        if changed:
            reason = ", ".join(f"{ref} has a new data version" for ref in changed)
            found[name] = StalePartitions(name, keys, reason, is_all=True)
            continue
        now = _input_figures(session, context, name, readings)
        if now is None:
            continue
        differing = sorted(
            key
            for key in set(now) | set(recorded)
            if key != NULL_PARTITION and now.get(key) != tuple(recorded.get(key) or ())
        )
        found[name] = StalePartitions(name, tuple(differing), f"{base} has new rows in them")
    return found


def _evidence_figures(
    session: Session, context: ProjectContext, name: str, readings: dict[str, BusinessReading]
) -> dict[str, tuple[Any, ...]] | None:
    """A model cut like its business-versioned `from`: the per-partition evidence its build
    compares (engine.sources.business.partition_groups), from the listing and the ledger, no row read.
    Other models over such a source are not answered here (their figures would need a scan)."""
    project = context.project
    compiled = context.compiled.models[name]
    base = compiled.base_relation
    model, source = project.models[name], project.sources[base]
    if not business.is_cut_like_source(model, compiled, source):
        return None
    reading = readings.get(base)
    if reading is None:
        try:
            reading = business.read_business_source(
                session, context, base, is_full_refresh=False, is_hashed=False
            )
        except StrataError:
            return None  # a broken assumption: the build says which
        readings[base] = reading
    if reading.is_sliding:
        return None
    groups = business.partition_groups(reading, partition_grain(model))
    return {key: (count, evidence) for key, (count, evidence) in groups.items() if key is not None}


def _reads_a_view(context: ProjectContext, name: str) -> bool:
    """Whether `name` reads a view model as `from`: its build may group the rows of the source
    under the view or the view's own rows (engine.decisions.view_lineage), so its figures are left to the
    orchestrator's own staleness."""
    base = context.compiled.models[name].base_relation
    return base in context.project.models and context.project.models[base].properties.is_view


def _input_figures(
    session: Session, context: ProjectContext, name: str, readings: dict[str, BusinessReading]
) -> dict[str, tuple[Any, ...]] | None:
    """Row count and row-hash sum of `name`'s raw `from` rows per partition, as its build records them."""
    project = context.project
    compiled = context.compiled.models[name]
    base = compiled.base_relation
    source = project.sources.get(base)
    if source is not None and source.is_business_versioned:
        return _evidence_figures(session, context, name, readings)
    relation = model_view(base, context.branch) if source is None else source_table(source, project, {})
    basis = WHOLE_ROW if source is None else source_basis(source)
    try:
        groups = session.content_by_group(relation, raw_partition_of(project.models[name], compiled), basis)
    except WarehouseError:
        return None  # an input not readable now: the build will say why
    return {
        NULL_PARTITION if key is None else key: (count, hash_sum) for key, (count, hash_sum) in groups.items()
    }
