"""Compile-time checks of model properties against the model's output columns."""

from __future__ import annotations

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.scope import unknown_column
from strata_dagster.errors import (
    E_CDC_COLUMN,
    E_MERGE_KEYS,
    E_MERGE_ON_AGGREGATE,
    E_PARTITION_COLUMN,
    StrataError,
)
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES, KEYED_STRATEGIES, Model


def property_errors(model: Model, compiled: CompiledModel) -> list[StrataError]:
    """Every property mistake of one model (E087-E089, E010, unknown columns in pins)."""
    props = model.properties
    columns = compiled.columns
    errors: list[StrataError] = []
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
