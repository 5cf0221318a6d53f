"""Frames as the Dagster layer meets them: polars, pandas or pyarrow, each library loaded only when
a frame of it is at hand (importing them costs seconds of a run's start on a busy machine)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg

from strata_dagster.backends.duckdb.frames import frame_fingerprint

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    import pyarrow as pa

_FRAME_TYPES = {"polars": "DataFrame", "pandas": "DataFrame", "pyarrow": "Table"}


def loaded_frame_type(module: str) -> type | None:
    """`module`'s frame class if the module is loaded: an object or annotation of that type
    implies the module is loaded, so an unloaded one is never imported just to be ruled out."""
    loaded = sys.modules.get(module)
    return None if loaded is None else getattr(loaded, _FRAME_TYPES[module])


def is_frame(obj: Any) -> bool:
    types = [found for found in map(loaded_frame_type, _FRAME_TYPES) if found is not None]
    return bool(types) and isinstance(obj, tuple(types))


def is_pandas_frame(obj: Any) -> bool:
    frame = loaded_frame_type("pandas")
    return frame is not None and isinstance(obj, frame)


def to_arrow(frame: pl.DataFrame | pd.DataFrame | pa.Table) -> pa.Table:
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame
    polars: type[pl.DataFrame] | None = loaded_frame_type("polars")
    if polars is not None and isinstance(frame, polars):
        return frame.to_arrow()
    return pa.Table.from_pandas(frame, preserve_index=False)


def with_content_version(value: Any) -> Any:
    """A Python model's return value as an Output whose data version is the frame's content (what
    its snapshot will hold), known before the IO manager writes it; other values as they are."""
    if isinstance(value, dg.Output) or not is_frame(value):
        return value
    return dg.Output(value, data_version=dg.DataVersion(frame_fingerprint(to_arrow(value))))


def raw(value: Any) -> Any:
    """A definition metadata value as the user wrote it (Dagster may wrap lists and dicts)."""
    return value.value if isinstance(value, dg.MetadataValue) else value


def parse_contract(value: Any) -> tuple[tuple[str, str, bool], ...]:
    """`{"order_id": "BIGINT not null", "region": "VARCHAR"}` -> (column, type, is_not_null) rows."""
    if not value:
        return ()
    columns = []
    for column, text in dict(value).items():
        words = str(text).split()
        is_not_null = [word.lower() for word in words[-2:]] == ["not", "null"]
        type_text = " ".join(words[:-2] if is_not_null else words)
        columns.append((str(column), type_text, is_not_null))
    return tuple(columns)


def model_name(metadata: Mapping[str, Any], key: dg.AssetKey) -> str:
    from strata_dagster.orchestration import constants as c

    name = metadata.get(c.MODEL_KEY)
    return str(raw(name)) if name else key.path[-1]
