"""A process of its own that does a few things to a warehouse on either engine, for the kill
tests: `python -m strata_dagster_tests.support.engine_driver SPEC.json`. The spec says the engine and
warehouse, then `actions`, done in order in the same process:

- `run`: build the project (a `STRATA_KILL_AT` step in the environment kills this process there);
- `inspect`: print, as one JSON line, the interrupted publications a reader finds, every live
  view's rows and every model's full rebuild (as text, sorted), without writing anything;
- `open`: open the warehouse for writing and close it (a writer repairs what a crash left);
- `{"tables": {table: [columns, rows]}}`: write those source tables (rows as text);
- `{"kill_at": step}`: from here on, this process kills itself at that write step.

One JVM per process on Spark, and a kill ends the process: so one process repairs and checks what
the last kill left, changes the sources and is killed at the next step.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

import sqlglot

from strata_dagster.backends.base import WarehouseError
from strata_dagster.backends.choice import backend_choice, choose_backend
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import model_view
from strata_dagster.engine.run import run_project
from strata_dagster.faults import KILL_AT_ENV
from strata_dagster_tests.support.engines_support import EngineUnderTest


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    name, warehouse = spec["engine"], Path(spec["warehouse"])
    choose_backend(backend_choice(name))
    spark = None
    if name == "spark":
        from strata_dagster.backends.spark.connect import local_session

        spark = local_session(warehouse)
        spark.sparkContext.setLogLevel("OFF")
    engine = EngineUnderTest(name, warehouse, warehouse.parent, spark)
    for action in spec["actions"]:
        if isinstance(action, dict) and "tables" in action:
            _write_tables(engine, action["tables"])
        elif isinstance(action, dict):
            os.environ[KILL_AT_ENV] = action["kill_at"]
        elif action == "run":
            run_project(spec["project"], warehouse)
        elif action == "open":
            with open_session(warehouse):
                pass
        elif action == "inspect":
            print(json.dumps(inspect(warehouse, spec["full"])), flush=True)


def _write_tables(engine: EngineUnderTest, tables: dict[str, list]) -> None:
    for table, (columns, rows) in tables.items():
        kinds = [kind for _, kind in columns]
        typed = [tuple(_typed(value, kind) for value, kind in zip(row, kinds, strict=True)) for row in rows]
        engine.write_table(table, [tuple(column) for column in columns], typed)


def _typed(text: str, kind: str) -> object:
    """A value the spec carries as text, as the Python value of its column type."""
    if text == "None":
        return None
    if kind in ("BIGINT", "INTEGER"):
        return int(text)
    if kind == "TIMESTAMP":
        return dt.datetime.fromisoformat(text)
    return text


def _text(rows: list[tuple]) -> list[str]:
    return sorted(json.dumps([str(value) for value in row]) for row in rows)


def inspect(warehouse: Path, full: dict[str, str]) -> dict[str, object]:
    """What readers see now, and what a full rebuild of each model over the sources gives."""
    with open_session(warehouse, read_only=True) as session:
        interrupted = [commit.commit_id for commit in session.interrupted]
        views: dict[str, list[str] | None] = {}
        rebuilt: dict[str, list[str]] = {}
        for model, query in full.items():
            try:
                views[model] = _text(session.read_rows(model_view(model))[1])
            except WarehouseError:
                views[model] = None
            rebuilt[model] = _text(session.read_rows(sqlglot.parse_one(query, read="duckdb"))[1])
    return {"interrupted": interrupted, "views": views, "full": rebuilt}


if __name__ == "__main__":
    main(sys.argv[1])
