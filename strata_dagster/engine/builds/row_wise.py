"""Row-wise models maintained incrementally without declarations.

A plain model (`replace`, no `partitioned_by`, not a view) whose pipeline is row-wise over its
`from` (filter, let, derive, select, expand, and inner or left joins) makes each of its rows from
one source row. When that source carries a change signal narrower than the whole table, the model
is built like a partitioned model, on slices of the source it never declared:

- a partitioned source: its own partitions (`partitioned_by: day(order_ts)` slices by the day of
  `order_ts`), when the model carries that column unchanged;
- a `versioning: cdc(col)` source: the days of `col`, when the model carries it unchanged and it is
  a DATE or TIMESTAMP. An update moves a row to the day of its new `col`, so the old day's
  figures change too: both days are recomputed, and a row updated or deleted out of the model
  (a filter move) disappears with its old day.

Only the slices whose source rows changed are recomputed completely and published as a segment
(engine.builds.partitions does the work; a keyed join to a changed input recomputes the slices its changed
keys reach). Anything else is built in full, with the reason in history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.determinism import volatile_calls
from strata_dagster.engine.builds.slice_tracing import traced_slice
from strata_dagster.language.definition import (
    AggregateStep,
    GroupStep,
    JoinStep,
    Model,
    PartitionSpec,
    Project,
    SetOperationStep,
)
from strata_dagster.sql.segments import RANGE_TYPES

ROW_WISE = "row_wise"  # detail key: the slicing a row-wise model is maintained by, e.g. `day(updated_at)`
NOT_ROW_WISE = "not maintained row-wise"

# An integer key is sliced by blocks of consecutive values, any other by hash buckets (sql.segments).
INTEGER_KEY_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}
)
ColumnTypes = Callable[[str], dict[str, str]]  # a source's column types by name (empty: unknown)


@dataclass(frozen=True)
class RowWise:
    """The slicing a row-wise model is maintained by."""

    spec: PartitionSpec  # over the model's output column
    source: str

    @property
    def text(self) -> str:
        return describe(self.spec)

    def as_partitioned(self, model: Model) -> Model:
        """The model as the partition builder sees it: partitioned by the implicit slicing."""
        return replace(model, properties=replace(model.properties, partitioned_by=self.spec))


def describe(spec: PartitionSpec) -> str:
    return spec.column if spec.grain == "key" else f"{spec.grain}({spec.column})"


def is_plain(model: Model) -> bool:
    props = model.properties
    return not props.is_view and props.merge_strategy == "replace" and props.partitioned_by is None


def row_wise(
    project: Project,
    compiled: CompiledModel,
    model: Model,
    types: ColumnTypes,
    key: str | None = None,
    is_bucketed: bool = True,
) -> RowWise | str:
    """How a plain model is maintained row-wise, or why it is not (a reason for history).

    `key`: the source's key (engine.builds.key_buckets.source_key), which slices it by key buckets when
    it has no change column; `is_bucketed`: whether the backend slices so."""
    problem = _pipeline_problem(model, compiled)
    if problem is not None:
        return problem
    source_name = compiled.base_relation
    source = project.sources.get(source_name)
    if source is None:
        return f"its `from` `{source_name}` is a model, not a source"
    if source.partitioned_by is not None:
        grain, column = source.partitioned_by.grain, source.partitioned_by.column
    elif source.versioning.kind == "cdc" and source.versioning.column:
        grain, column = "day", source.versioning.column
        type_name = types(source_name).get(column)
        if type_name not in RANGE_TYPES:
            return f"cdc column `{column}` of `{source_name}` is not a DATE or TIMESTAMP, so it has no days"
    elif source.versioning.kind == "full" and key is not None and is_bucketed:
        output = _carried(compiled, key)
        if output is None:
            return f"the model does not carry the key `{key}` of `{source_name}` unchanged, so its rows cannot be sliced"
        grain = "block" if types(source_name).get(key) in INTEGER_KEY_TYPES else "bucket"
        return RowWise(PartitionSpec(grain, output, model.location), source_name)
    elif key is not None and source.versioning.kind == "full":
        return (
            f"`{source_name}` has no change column, and this backend does not slice by its key `{key}`: "
            "no change signal narrower than the whole source"
        )
    else:
        return (
            f"`{source_name}` is neither partitioned nor `versioning: cdc(col)` and has no key (declare "
            "`key: [col]` on the source, or read it in a model with `merge_keys`): no change signal "
            "narrower than the whole source"
        )
    output = _carried(compiled, column)
    if output is None:
        traced = traced_slice(compiled, column, grain)
        if traced is None:
            return (
                f"the model does not carry `{column}` of `{source_name}` unchanged, nor its day or month "
                "through a `let`, so its rows cannot be sliced"
            )
        output, grain = traced
    return RowWise(PartitionSpec(grain, output, model.location), source_name)


def _pipeline_problem(model: Model, compiled: CompiledModel) -> str | None:
    for step in model.steps:
        if isinstance(step, (GroupStep, AggregateStep)):
            return "it groups rows (an output row reads many source rows)"
        if isinstance(step, SetOperationStep):
            return "a set operation brings rows of another relation"
        if isinstance(step, JoinStep) and step.kind not in ("inner", "left"):
            return f"a {step.kind} join brings rows of `{step.relation}` that no `from` row gives"
    if compiled.has_window:
        return "a window function reads other rows"
    if volatile_calls(model):
        return "it calls a volatile function (now(), random(), ...)"
    return None


def _carried(compiled: CompiledModel, column: str) -> str | None:
    """The output column carrying the source column `column` unchanged (its own name first)."""
    if column in compiled.let_names:
        return None  # a `let` of that name hides the source column
    if compiled.traced_column(column) == column:
        return column
    return next((output for output, base in compiled.lineage if base == column), None)
