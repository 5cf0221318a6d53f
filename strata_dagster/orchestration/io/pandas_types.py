"""A Python model's output type, from its `contract`: dagster-pandas checks a pandas frame (every
contract column present, `not null` columns without nulls, numbers, text and booleans of a fitting
dtype) before the IO manager writes anything. A polars or pyarrow frame passes here: the contract
is checked on its snapshot before it is published, as for every model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from strata_dagster.orchestration.io.frames import is_pandas_frame

_INTEGERS = {
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "INT",
    "BIGINT",
    "HUGEINT",
    "INT1",
    "INT2",
    "INT4",
    "INT8",
    "LONG",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
}
_FLOATS = {"DOUBLE", "FLOAT", "REAL", "FLOAT4", "FLOAT8"}
_TEXTS = {"VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR"}
_BOOLEANS = {"BOOLEAN", "BOOL", "LOGICAL"}


def contract_frame_type(model: str, contract: Sequence[tuple[str, str, bool]]) -> dg.DagsterType | None:
    """The output type of Python model `model` with `contract` (column, type, is_not_null) rows;
    None without a contract."""
    if not contract:
        return None
    pandas_type: list[
        dg.DagsterType
    ] = []  # built with the first pandas frame (dagster-pandas imports pandas)

    def check(_context: Any, value: Any) -> dg.TypeCheck:
        if not is_pandas_frame(value):
            return dg.TypeCheck(
                success=True, description="not a pandas frame: the contract is checked on its snapshot"
            )
        if not pandas_type:
            pandas_type.append(pandas_contract_type(model, contract))
        return dg.check_dagster_type(pandas_type[0], value)

    return dg.DagsterType(
        type_check_fn=check,
        name=f"{model}_frame",
        description=f"`{model}`'s frame: a pandas frame is checked against its contract by dagster-pandas.",
    )


def pandas_contract_type(model: str, contract: Sequence[tuple[str, str, bool]]) -> dg.DagsterType:
    """dagster-pandas' dataframe type of the contract's columns."""
    from dagster_pandas import PandasColumn, create_dagster_pandas_dataframe_type

    columns = []
    for name, type_text, is_not_null in contract:
        base = type_text.split("(")[0].strip().upper()
        if base in _FLOATS:
            columns.append(PandasColumn.float_column(name, non_nullable=is_not_null))
        elif base in _TEXTS:
            columns.append(PandasColumn.string_column(name, non_nullable=is_not_null))
        elif base in _INTEGERS and is_not_null:  # with nulls pandas holds integers as floats
            columns.append(PandasColumn.integer_column(name, non_nullable=True))
        elif base in _BOOLEANS and is_not_null:  # with nulls pandas holds booleans as objects
            columns.append(PandasColumn.boolean_column(name, non_nullable=True))
        else:  # decimals, dates, nested types: pandas dtypes vary; the snapshot's check is exact
            columns.append(PandasColumn.exists(name, non_nullable=is_not_null))
    return create_dagster_pandas_dataframe_type(name=f"{model}_pandas_contract", columns=columns)
