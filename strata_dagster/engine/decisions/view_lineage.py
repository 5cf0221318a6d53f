"""Partition discovery through view models: a partitioned model whose `from` is a view model finds
its changed partitions from the raw source under the view, in the scan that fingerprints that
source, as it does when it reads the source itself.

This holds only when each row of the view is one source row, filtered and with columns computed
from that row alone (no join, set operation, expand, aggregate, window or volatile call): then the
rows of a partition in the view come from the source rows of the same partition, and a partition
whose source rows did not change has the same rows in the view. Otherwise the build groups the
view's own rows (engine.builds.partitions.partition_fingerprints), which is always correct.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.determinism import volatile_calls
from strata_dagster.engine.builds.partitions import locality_problem_of, raw_partition_of
from strata_dagster.language.definition import Project


def source_partition_through_views(
    project: Project, compiled: Mapping[str, CompiledModel], name: str
) -> tuple[str, exp.Expr] | None:
    """The source under the view model(s) partitioned model `name` reads as `from`, and `name`'s
    partition expression over that source's raw rows; None when `from` is no such view."""
    model = project.models[name]
    if model.properties.partitioned_by is None or locality_problem_of(model, compiled[name]) is not None:
        return None
    expression: exp.Expr | None = raw_partition_of(model, compiled[name])
    relation = compiled[name].base_relation
    while (
        expression is not None and relation in project.models and project.models[relation].properties.is_view
    ):
        view_model = project.models[relation]
        view = compiled[relation]
        if (
            not view.is_base_passthrough
            or view.has_window
            or set(view_model.references) != {view.base_relation}
            or volatile_calls(view_model)
        ):
            return None
        expression = _through(view, expression)
        relation = view.base_relation
    if expression is None or relation == compiled[name].base_relation or relation not in project.sources:
        return None
    return relation, expression


def _through(view: CompiledModel, expression: exp.Expr) -> exp.Expr | None:
    """`expression` over the view's output columns, rewritten over the rows the view reads."""
    rewritten = expression.copy()
    for column in list(rewritten.find_all(exp.Column)):
        base = view.base_column(column.name)
        if base is None:
            return None
        replacement = view.base_expression(base)
        if column is rewritten:
            return replacement
        column.replace(replacement)
    return rewritten
