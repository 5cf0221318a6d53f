"""Arrow tables handed in by Python code (a Python model's frame), readable as a relation."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.backends.sql.figures import content_of
from strata_dagster.sql.render import table

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa

_FRAME_PREFIX = "__strata_frame_"
_counter = itertools.count()


@contextmanager
def registered_frame(session: Session, frame: pa.Table) -> Iterator[exp.Table]:
    """`frame` as a relation of this connection for the duration of the block (zero-copy)."""
    name = f"{_FRAME_PREFIX}{next(_counter)}"
    session.register_frame(name, frame)
    try:
        yield table(name)
    finally:
        session.unregister_frame(name)


def frame_fingerprint(frame: pa.Table) -> str:
    """The content fingerprint of `frame` (columns, row count, row hashes), as a snapshot of it
    records it, computed in an in-memory DuckDB: known before anything is written (a Python
    model's data version)."""
    con = duckdb.connect()
    try:
        con.register(f"{_FRAME_PREFIX}fingerprint", frame)
        return content_of(con, table(f"{_FRAME_PREFIX}fingerprint")).fingerprint
    finally:
        con.close()
