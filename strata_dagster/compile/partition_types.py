"""Compile-time checks that partition columns are totally ordered (DATE, TIMESTAMP or an integer).

Business-driven versioning orders partitions to tell a new one from a backfill into a past slot,
and Dagster maps a partitioned model onto time partitions: a string or categorical column has no
such order, so both are refused before anything runs. Types come from the source schemas the
warehouse could read; a column whose type is not known here is left to later checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.errors import E_PARTITION_START, E_PARTITION_TYPE, StrataError
from strata_dagster.language.definition import BUSINESS_VERSIONINGS, Model, Project, Source

_TIME_PREFIXES = ("DATE", "TIMESTAMP")
INTEGER_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
)


def is_time_type(type_name: str) -> bool:
    return type_name.upper().startswith(_TIME_PREFIXES)


def is_ordered_type(type_name: str) -> bool:
    """DATE, TIMESTAMP (any precision or zone) or an integer: a total order partitions can follow."""
    return is_time_type(type_name) or type_name.upper() in INTEGER_TYPES


def _types(columns: Sequence[tuple[str, str]] | Sequence[str]) -> dict[str, str]:
    return {column[0]: column[1] for column in columns if not isinstance(column, str)}


def source_partition_type_error(source: Source, types: Mapping[str, str]) -> StrataError | None:
    spec = source.partitioned_by
    if spec is None or source.versioning.kind not in BUSINESS_VERSIONINGS or spec.column not in types:
        return None
    type_name = types[spec.column]
    if is_ordered_type(type_name):
        return None
    return StrataError(
        E_PARTITION_TYPE,
        f"source `{source.name}` is `versioning: {source.versioning.kind}` partitioned by `{spec.column}`, "
        f"a {type_name} column: partitions must be totally ordered to tell a new one from a backfill",
        spec.location,
        hint="partition by a DATE, TIMESTAMP or integer column (e.g. `dt=2026-03-01/` folders), "
        "or use `versioning: full`",
    )


def source_start_error(source: Source, types: Mapping[str, str]) -> StrataError | None:
    """A `start:` that cannot be the first value of the partition column: a date for the integer
    column of a business-versioned source (its partitions are the integers), an integer for a DATE
    or TIMESTAMP one or a `day(...)` / `month(...)` partition."""
    spec = source.partitioned_by
    if spec is None or source.start is None or spec.column not in types:
        return None
    type_name = types[spec.column]
    is_integer_start = isinstance(source.start, int)
    if is_time_type(type_name) and is_integer_start and spec.grain == "key":
        wanted, example = "a date", "2026-03-01"
    elif (
        source.is_business_versioned
        and is_ordered_type(type_name)
        and not is_time_type(type_name)
        and not is_integer_start
    ):
        wanted, example = "an integer", "1"
    elif is_integer_start and spec.grain != "key":
        wanted, example = "a date", "2026-03-01"
    else:
        return None
    return StrataError(
        E_PARTITION_START,
        f"source `{source.name}` starts at `{source.start}`, but its partition column `{spec.column}` is "
        f"{type_name}: its `start:` must be {wanted}",
        source.start_location or source.location,
        hint=f"write the first partition as {wanted}, e.g. `start: {example}`",
    )


def model_partition_type_error(
    model: Model, compiled: CompiledModel, source_types: Mapping[str, Mapping[str, str]]
) -> StrataError | None:
    """A partitioned model whose partition column is a source column of a non-time type: Dagster
    would give it daily partitions unrelated to its data."""
    spec = model.properties.partitioned_by
    if spec is None:
        return None
    base = compiled.traced_column(spec.column)
    types = source_types.get(compiled.base_relation)
    if base is None or types is None:
        return None
    expression = compiled.base_expression(base)
    if not isinstance(expression, exp.Column) or expression.name not in types:
        return None
    type_name = types[expression.name]
    if is_time_type(type_name):
        return None
    return StrataError(
        E_PARTITION_TYPE,
        f"model `{model.name}` is partitioned by `{spec.column}`, a {type_name} column of "
        f"`{compiled.base_relation}`: its partitions map to days or months, which need a DATE or TIMESTAMP",
        spec.location,
        hint=f"partition by a date column, e.g. `let day = cast({expression.name} as date)` then "
        "`partitioned_by: day`, or drop `partitioned_by`",
    )


def partition_type_errors(
    project: Project,
    compiled: Mapping[str, CompiledModel],
    source_schemas: Mapping[str, Sequence[tuple[str, str]] | Sequence[str]],
) -> list[StrataError]:
    """E050 for every business-versioned source and partitioned model whose partition column has
    no total order, as far as the source schemas tell."""
    source_types = {name: _types(columns) for name, columns in source_schemas.items()}
    errors = []
    for name, source in project.sources.items():
        for error in (
            source_partition_type_error(source, source_types.get(name, {})),
            source_start_error(source, source_types.get(name, {})),
        ):
            if error is not None:
                errors.append(error)
    for name in project.order:
        if name in compiled:
            error = model_partition_type_error(project.models[name], compiled[name], source_types)
            if error is not None:
                errors.append(error)
    return errors
