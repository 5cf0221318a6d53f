"""The first and last partition a partitioned source or model holds, or a build of it would read."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.partitions import partition_bounds
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.compile.relations import ROLE_SCHEMA, model_view
from strata_dagster.engine.builds.partitions import locality_problem_of, raw_partition_of
from strata_dagster.engine.context import ProjectContext
from strata_dagster.errors import W_BOUNDS_UNREAD, Location, StrataWarning
from strata_dagster.language.definition import PartitionSpec

_PARTITION = "__partition"


@dataclass(frozen=True)
class PartitionBounds:
    """The first and last partition (a day, or a month's first day) the data falls in."""

    first: dt.date
    last: dt.date


def model_bounds(session: Session, context: ProjectContext, name: str) -> PartitionBounds | None:
    """The first and last partition of partitioned model `name`'s input as a build now reads it: the
    partitions its `from` rows fall in (before any filter: a column scan), or, when its partitions
    do not trace back to them, the partitions of the rows a full build would give."""
    project = context.project
    model = project.models[name]
    compiled = context.compiled.models[name]
    spec = model.properties.partitioned_by
    assert spec is not None
    base = compiled.base_relation
    if spec.grain == "key" or locality_problem_of(model, compiled) is not None:
        return query_bounds(session, inlined_query(context, name), spec, None)
    # A model's live rows stand for it (a model never built yet: the rows a build would give).
    relations: list[exp.Table | exp.Subquery] = (
        [source_relation(context, base)]
        if base in project.sources
        else [model_view(base, context.branch), inlined_query(context, base).subquery(base)]
    )
    for relation in relations:
        keys = exp.select(raw_partition_of(model, compiled).as_(_PARTITION)).from_(relation)
        try:
            found = partition_bounds(session, keys, _PARTITION, "day")  # the keys are days already
        except WarehouseError:
            continue
        return PartitionBounds(*found) if found else None
    return None


@dataclass(frozen=True)
class Unread:
    """Where a partition-bounds query that fails is told: what it read, and the list to add to."""

    what: str
    location: Location | None
    into: list[StrataWarning]


def query_bounds(
    session: Session, query: exp.Query, spec: PartitionSpec, unread: Unread | None
) -> PartitionBounds | None:
    """The first and last partition of `query`'s rows; None when none or when they cannot be read
    (the orchestrator falls back to a default). A relation not there yet is expected (a source
    not loaded, a model not built) and quiet; any other refusal is a warning for `unread`."""
    try:
        found = partition_bounds(session, query, spec.column, spec.grain)
    except WarehouseError as error:
        if unread is not None and not error.is_missing_relation:
            unread.into.append(
                StrataWarning(
                    W_BOUNDS_UNREAD,
                    f"the partitions of {unread.what} could not be read ({error}); "
                    "its partitions start at the default until they can",
                    unread.location,
                    hint="run `strata run PROJECT` to see the same query fail with its full error",
                )
            )
        return None
    return PartitionBounds(*found) if found else None


def source_relation(context: ProjectContext, name: str) -> exp.Table:
    return source_table(context.project.sources[name], context.project, context.overrides)


def inlined_query(context: ProjectContext, name: str) -> exp.Query:
    """Model `name`'s query reading only sources: upstream models are inlined as subqueries, so it
    gives the rows a build would give now, whether or not anything was ever built."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.db == ROLE_SCHEMA:
            alias = node.alias or node.name
            if node.name in context.project.sources:
                table = source_relation(context, node.name)
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
                return table
            return inlined_query(context, node.name).subquery(alias)
        return node

    # The root is a Select, never a Table: `replace` keeps it, so the query stays a query.
    return cast(exp.Query, context.compiled.models[name].statement.copy().transform(replace, copy=False))
