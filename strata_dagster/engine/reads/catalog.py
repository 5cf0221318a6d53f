"""What an orchestrator needs to declare a project, read without writing anything.

Code versions (model fingerprints, exactly as `run` computes them), for partitioned sources and
models the first and last partition the data holds, and for partitioned models whose `from` is
unpartitioned, how a build groups its rows by partition. The warehouse is opened read-only:
loading definitions never migrates, writes or holds the write lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.lineage import ColumnDeps
from strata_dagster.compile.relations import DEFAULT_BRANCH, DefaultRelations
from strata_dagster.engine.builds.partition_bounds import (
    PartitionBounds,
    Unread,
    inlined_query,
    query_bounds,
    source_relation,
)
from strata_dagster.engine.builds.partitions import locality_problem_of, raw_partition_of
from strata_dagster.engine.context import ProjectContext, load_context
from strata_dagster.engine.decisions.removed import removed_models, removed_warning
from strata_dagster.engine.reads.columns import RelationColumns, read_columns, read_lineage
from strata_dagster.engine.sources.business import is_cut_like_source
from strata_dagster.engine.sources.readings import fingerprint_models
from strata_dagster.errors import E_WAREHOUSE, StrataError, StrataWarning
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES, Model, Project
from strata_dagster.language.expressions import DIALECT


@dataclass(frozen=True)
class PartitionInput:
    """A partitioned model whose `from` is an unpartitioned source or model: each build
    fingerprints the upstream's rows per partition of this model (the partition column traced back
    to them, before any filter) and recomputes exactly the partitions whose rows changed."""

    model: str  # the partitioned model
    upstream: str  # the unpartitioned source or model it reads as `from`
    grain: str  # `day` or `month`
    grouping: str  # the partition expression over the upstream's rows: equal ones group alike


@dataclass(frozen=True)
class WarehouseReading:
    """What a catalog reads from the warehouse: the sources' columns the project compiles against,
    the partitions the data holds, the columns of sources and models, and what could not be read
    (or what the warehouse still serves that the project no longer defines)."""

    engine: str  # the engine the project compiled for (`duckdb`, `spark`)
    source_schemas: dict[str, tuple[tuple[str, str], ...]]
    bounds: dict[str, PartitionBounds | None]
    columns: dict[str, RelationColumns]
    warnings: tuple[StrataWarning, ...]
    # model -> output column -> what it derives from: follows from the project and `columns`, kept
    # because tracing it costs more than the rest of a catalog built from a reading
    lineage: dict[str, dict[str, ColumnDeps]]


@dataclass(frozen=True)
class Catalog:
    project: Project
    branch: str
    fingerprints: dict[str, str]  # model -> fingerprint: the code version of its builds
    sql: dict[str, str]  # model -> its compiled SQL, reading sources and the branch's live views
    bounds: dict[str, PartitionBounds | None]  # partitioned source or model -> partitions in its data
    # partitioned model -> the unpartitioned source or model its builds fingerprint per partition
    partition_inputs: dict[str, PartitionInput] = field(default_factory=dict)
    # source or model -> its columns with types, as known without building (see engine.reads.columns)
    columns: dict[str, RelationColumns] = field(default_factory=dict)
    # model -> output column -> the (source or model, column) pairs it derives from
    lineage: dict[str, dict[str, ColumnDeps]] = field(default_factory=dict)
    # partitioned source or model -> the business-versioned source whose arriving partitions its
    # own partitions follow (the source itself, and the models cut like it)
    arrivals: dict[str, str] = field(default_factory=dict)
    # what the orchestrator warns about where it loads: what could not be read while reading the
    # catalog (it shows defaults instead), live views of models the project no longer defines
    warnings: tuple[StrataWarning, ...] = ()


def read_catalog(project_dir: Path | str, warehouse: Path | str, branch: str = DEFAULT_BRANCH) -> Catalog:
    """Fingerprints and partition bounds of every model and source. Raises StrataError (E020) when
    the warehouse does not exist yet, naming the command that creates it."""
    path = Path(warehouse)
    if not path.exists():
        raise StrataError(
            E_WAREHOUSE,
            f"warehouse `{path}` does not exist",
            hint="create it first: `strata sample-data PROJECT` for the example, or `strata run PROJECT`",
        )
    with open_session(path, read_only=True) as session:
        context = load_context(session, Path(project_dir), {}, branch)
        arrivals = _arrivals(context)
        unread: list[StrataWarning] = []
        bounds = _bounds(session, context, arrivals, unread)
        columns = read_columns(session, context, lambda name: inlined_query(context, name))
        if session.has_history():
            reader = session.history
            removed = removed_models(reader, reader.pointers(branch), context.project)
            if removed:
                unread.append(removed_warning(removed, branch))
        engine = session.backend
    lineage = read_lineage(context, columns)
    reading = WarehouseReading(engine, dict(context.source_schemas), bounds, columns, tuple(unread), lineage)
    return _catalog(context, reading, arrivals)


def _catalog(context: ProjectContext, reading: WarehouseReading, arrivals: dict[str, str]) -> Catalog:
    fingerprints = {name: fp.value for name, fp in fingerprint_models(context).items()}
    relations = DefaultRelations(context.project, context.branch)
    sql = {name: context.compiled.sql(name, relations) for name in context.compiled.models}
    inputs = {
        name: found
        for name in context.project.order
        if (found := partition_input(context.project, name, context.compiled.models[name])) is not None
    }
    return Catalog(
        context.project,
        context.branch,
        fingerprints,
        sql,
        reading.bounds,
        inputs,
        reading.columns,
        reading.lineage,
        arrivals,
        reading.warnings,
    )


def _arrivals(context: ProjectContext) -> dict[str, str]:
    project = context.project
    found = {
        name: name
        for name, source in project.sources.items()
        if source.is_business_versioned and source.partitioned_by is not None
    }
    for name in project.order:
        compiled = context.compiled.models[name]
        base = compiled.base_relation
        if base in found and is_cut_like_source(project.models[name], compiled, project.sources[base]):
            found[name] = base
    return found


def partition_input(project: Project, name: str, compiled: CompiledModel) -> PartitionInput | None:
    """How a partition-complete build of model `name` groups the rows of its unpartitioned `from`
    (a source or a model), or None when it does not read one that way (not partitioned,
    incremental, `from` a partitioned source or model, or partitions that read other partitions'
    rows: every build is full)."""
    model: Model = project.models[name]
    spec = model.properties.partitioned_by
    if spec is None or model.properties.merge_strategy in INCREMENTAL_STRATEGIES:
        return None
    upstream = compiled.base_relation
    if upstream in project.sources:
        upstream_spec = project.sources[upstream].partitioned_by
    elif upstream in project.models:
        upstream_spec = project.models[upstream].properties.partitioned_by
    else:
        return None
    if upstream_spec is not None:
        return None
    if locality_problem_of(model, compiled) is not None:
        return None
    grouping = raw_partition_of(model, compiled).sql(dialect=DIALECT)
    return PartitionInput(name, upstream, spec.grain, grouping)


def _bounds(
    session: Session, context: ProjectContext, arrivals: dict[str, str], unread: list[StrataWarning]
) -> dict[str, PartitionBounds | None]:
    project = context.project
    bounds: dict[str, PartitionBounds | None] = {}
    for name, source in project.sources.items():
        if isinstance(source.start, int):
            bounds[name] = None  # integer partitions: dynamic in Dagster, no calendar to bound
        elif source.partitioned_by is not None:
            found = query_bounds(
                session,
                exp.select("*").from_(source_relation(context, name)),
                source.partitioned_by,
                Unread(f"source `{name}`", source.location, unread),
            )
            first = source.start or (found.first if found else None)
            last = found.last if found else first
            bounds[name] = PartitionBounds(first, max(first, last)) if first and last else None
    for name in project.order:
        spec = project.models[name].properties.partitioned_by
        if spec is not None and name in arrivals:
            bounds[name] = bounds[
                arrivals[name]
            ]  # cut like the source: its partitions, no query over its rows
        elif spec is not None:
            model = project.models[name]
            bounds[name] = query_bounds(
                session, inlined_query(context, name), spec, Unread(f"model `{name}`", model.location, unread)
            )
    return bounds
