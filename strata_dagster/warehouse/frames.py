"""Arrow tables handed in by Python code (a Python model's frame), readable as a relation."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import Session
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
