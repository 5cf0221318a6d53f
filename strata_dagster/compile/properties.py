"""Compile-time checks of model properties against the model's output columns."""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.scope import unknown_column
from strata_dagster.errors import (
    E_CDC_COLUMN,
    E_HISTORY_SOURCE,
    E_MERGE_KEYS,
    E_MERGE_ON_AGGREGATE,
    E_PARTIAL_MONTH,
    E_PARTITION_COLUMN,
    E_VIEW_MODEL,
    StrataError,
)
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES, KEYED_STRATEGIES, FilterStep, Model


def property_errors(model: Model, compiled: CompiledModel) -> list[StrataError]:
    """Every property mistake of one model (E087-E089, E010, E017, unknown columns in pins)."""
    props = model.properties
    columns = compiled.columns
    errors: list[StrataError] = view_errors(model)
    strategy = props.merge_strategy
    where = props.location_of

    if strategy in INCREMENTAL_STRATEGIES and model.has_aggregation:
        errors.append(
            StrataError(
                E_MERGE_ON_AGGREGATE,
                f"model `{model.name}` merges `{strategy}` deltas but groups and aggregates",
                where("merge_strategy") or model.location,
                hint="re-aggregating a delta alone gives wrong totals; use `merge_strategy: replace` "
                "(or `partitioned_by` for partition-complete incremental builds)",
            )
        )
    if strategy in INCREMENTAL_STRATEGIES:
        if props.cdc_column is None:
            errors.append(
                StrataError(
                    E_CDC_COLUMN,
                    f"model `{model.name}` uses `merge_strategy: {strategy}` without `cdc_column`",
                    where("merge_strategy") or model.location,
                    hint="add `cdc_column: <column>`, the output column whose watermark defines the delta",
                )
            )
        elif columns is not None and props.cdc_column not in columns:
            errors.append(
                StrataError(
                    E_CDC_COLUMN,
                    f"`cdc_column: {props.cdc_column}` is not an output column of model `{model.name}`",
                    where("cdc_column") or model.location,
                    hint="output columns: " + ", ".join(columns),
                )
            )
    history_only = {
        "check_columns": "says which columns open a new version of a history model",
        "deleted_flag": "names a history model's column saying whether a delete closed the version",
    }
    for name, what in history_only.items():
        if getattr(props, name) is not None and strategy != "history":
            errors.append(
                StrataError(
                    E_HISTORY_SOURCE,
                    f"model `{model.name}` sets `{name}` but is not a `merge_strategy: history` model",
                    where(name) or model.location,
                    hint=f"`{name}` {what}; remove it, or use `merge_strategy: history`",
                )
            )
    if strategy in KEYED_STRATEGIES:
        keys = props.merge_keys
        if not keys:
            errors.append(
                StrataError(
                    E_MERGE_KEYS,
                    f"model `{model.name}` uses `merge_strategy: {strategy}` without `merge_keys`",
                    where("merge_keys") or where("merge_strategy") or model.location,
                    hint="add `merge_keys: [key_column, ...]`, the columns that identify a row",
                )
            )
        elif columns is not None and (missing := [key for key in keys if key not in columns]):
            errors.append(
                StrataError(
                    E_MERGE_KEYS,
                    f"merge key `{missing[0]}` is not an output column of model `{model.name}`",
                    where("merge_keys") or model.location,
                    hint="output columns: " + ", ".join(columns),
                )
            )
    partition = props.partitioned_by
    if partition is not None and columns is not None and partition.column not in columns:
        errors.append(
            StrataError(
                E_PARTITION_COLUMN,
                f"model `{model.name}` is partitioned by `{partition.column}`, which it does not output",
                partition.location,
                hint=f"add `{partition.column}` to the model's `select` / `group`, or partition by an output column",
            )
        )
    if columns is not None:
        for prop in ("unique", "order_by"):
            for name in getattr(props, prop) or ():
                if name not in columns:
                    errors.append(unknown_column(name, columns, model.name, where(prop)))
                    break
        for column in props.contract or ():
            if column.name not in columns:
                errors.append(unknown_column(column.name, columns, model.name, column.location))
    return errors


# What a view stores nothing to honour: each needs the model's rows kept, or read in full every run.
_NOT_FOR_VIEWS = (
    ("incremental", "a view has no state to merge a delta into"),
    ("merge_strategy", "a view has no state to merge a delta into"),
    ("merge_keys", "a view has no state to merge a delta into"),
    ("cdc_column", "a view has no state to merge a delta into"),
    ("lateness", "a view has no state to merge a delta into"),
    ("partitioned_by", "a view has no partitions to build one by one"),
    (
        "unique",
        "a pin on a view would hold only at build time, while the view shows its sources' rows as they change",
    ),
)


def view_errors(model: Model) -> list[StrataError]:
    """E017: `materialize: view` with a property that needs stored rows."""
    props = model.properties
    if not props.is_view:
        return []
    errors = []
    for name, reason in _NOT_FOR_VIEWS:
        if props.location_of(name) is None or (
            name == "merge_strategy" and props.merge_strategy == "replace"
        ):
            continue
        errors.append(
            StrataError(
                E_VIEW_MODEL,
                f"model `{model.name}` is `materialize: view` but sets `{name}`: {reason}",
                props.location_of(name),
                hint=f"remove `{name}`, or use `materialize: table`",
            )
        )
    for column in props.contract or ():
        if column.is_not_null:
            errors.append(
                StrataError(
                    E_VIEW_MODEL,
                    f"model `{model.name}` is `materialize: view`: its contract can check column `{column.name}`'s "
                    "type, not that it holds no NULL (that reads every row on every run)",
                    column.location,
                    hint=f"drop `not null` from `{column.name}`, or use `materialize: table`",
                )
            )
    return errors


_COMPARISONS = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ, exp.Between, exp.In)


def _is_month_truncated(column: exp.Column) -> bool:
    """Whether the column is read through date_trunc('month', ...) within its comparison."""
    node = column.parent
    while node is not None and not isinstance(node, _COMPARISONS):
        if isinstance(node, exp.DateTrunc | exp.TimestampTrunc) and node.text("unit").lower() == "month":
            return True
        node = node.parent
    return False


def partial_month_errors(model: Model, compiled: CompiledModel) -> list[StrataError]:
    """docs/architecture.md, R6: a month partition fed a partial-month cutoff (a filter on its days) loses rows."""
    spec = model.properties.partitioned_by
    if spec is None or spec.grain != "month":
        return []
    base = compiled.traced_column(spec.column)
    if base is None:
        return []
    lets = dict(compiled.lets)

    def sources_of(name: str) -> set[str]:
        """The source columns a name stands for (a let is read through its inlined expression)."""
        if name in lets:
            return {column.name for column in lets[name].find_all(exp.Column)}
        return {name}

    expression = compiled.base_expression(base)
    is_month_aligned = any(
        isinstance(node, exp.DateTrunc | exp.TimestampTrunc) and node.text("unit").lower() == "month"
        for node in expression.find_all(exp.DateTrunc, exp.TimestampTrunc)
    )
    # A partition column that is already a month may be filtered freely; one holding days may not.
    exempt = {spec.column} if is_month_aligned else set()
    day_columns = sources_of(base) - exempt
    errors = []
    for step in model.steps:
        if not isinstance(step, FilterStep):
            continue
        for comparison in step.condition.node.find_all(*_COMPARISONS):
            cut = [
                column
                for column in comparison.find_all(exp.Column)
                if column.name not in exempt
                and (sources_of(column.name) & day_columns or column.name in day_columns)
                and not _is_month_truncated(column)
            ]
            if cut:
                errors.append(
                    StrataError(
                        E_PARTIAL_MONTH,
                        f"model `{model.name}` is partitioned by month but filters on `{cut[0].name}` "
                        "within months: a cut-off inside a month leaves that month partial",
                        step.condition.location,
                        hint=f"filter whole months, e.g. `date_trunc('month', {cut[0].name}) >= DATE '2025-01-01'`, "
                        "or filter in an upstream model",
                    )
                )
                break
    return errors
