"""A tiny project over one cdc source, for incremental tests: upsert, append and append_new models."""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import duckdb

from strata_dagster.engine.builds import segment_compaction
from strata_dagster_tests.support.engine_support import make_module_project, rows_as_text

MODULE = """
source events {
  table: raw.events
  versioning: cdc(ts)
}

model up {
  from events
  let day = cast(ts as date)
  filter status <> 'void'
  incremental
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: ts
  unique: [id]
}

model ap {
  from events
  select id, status, v, ts
  incremental
  merge_strategy: append
  cdc_column: ts
}

model an {
  from events
  filter v >= 0
  select id, v, ts
  incremental
  merge_strategy: append_new
  merge_keys: [id]
  cdc_column: ts
}
"""

# An upsert model reading the source through a `materialize: view` model.
VIEW_MODULE = """
source events {
  table: raw.events
  versioning: cdc(ts)
}

model ev {
  from events
  filter v >= -1
  derive v2 = v * 2
  materialize: view
}

model up_v {
  from ev
  filter status <> 'void'
  incremental
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: ts
  unique: [id]
}
"""
FULL_UP_V = "SELECT *, v * 2 AS v2 FROM raw.events WHERE v >= -1 AND status <> 'void'"

# The same models, rebuilt fully by plain SQL: what an incremental build must equal (upsert).
FULL_UP = "SELECT *, CAST(ts AS DATE) AS day FROM raw.events WHERE status <> 'void'"
FULL_AP = "SELECT id, status, v, ts FROM raw.events"
FULL_AN = "SELECT id, v, ts FROM raw.events WHERE v >= 0"
WINDOW_AP = "SELECT id, status, v, ts FROM raw.events WHERE ts > ? AND ts <= ?"
WINDOW_AN = "SELECT id, v, ts FROM raw.events WHERE v >= 0 AND ts > ? AND ts <= ?"


def with_lateness(module: str, lateness: str) -> str:
    """The models of `module`, each re-reading `lateness` before its watermark."""
    return module.replace("  cdc_column: ts\n", f"  cdc_column: ts\n  lateness: '{lateness}'\n")


LATE_MODULE = with_lateness(MODULE, "2 hours")


def make_project(root: Path, module: str = MODULE, versioning: str = "cdc(ts)") -> tuple[Path, Path]:
    return make_module_project(
        root,
        "events.strata",
        module.replace("versioning: cdc(ts)", f"versioning: {versioning}"),
        "CREATE OR REPLACE TABLE raw.events (id BIGINT, status VARCHAR, v INTEGER, ts TIMESTAMP)",
    )


def multiset(con: duckdb.DuckDBPyConnection, query: str, params=None) -> list:
    """The rows of `query` as a multiset (engine_support.rows_as_text)."""
    return con.execute(rows_as_text(f"({query})"), params or []).fetchall()


@contextlib.contextmanager
def compaction_thresholds(is_eager: bool) -> Iterator[None]:
    """With `is_eager`, segments are compacted at every chance the rules give on small states (a
    third segment, a second one that only adds rows, any dead row): property tests then run each
    kind of compaction (engine.builds.segment_compaction) under random histories."""
    if not is_eager:
        yield
        return
    with contextlib.ExitStack() as stack:
        for name, value in (("MAX_SEGMENTS", 2), ("MAX_ADDED_SEGMENTS", 2), ("MIN_DEAD_ROWS", 1)):
            stack.enter_context(mock.patch.object(segment_compaction, name, value))
        yield
