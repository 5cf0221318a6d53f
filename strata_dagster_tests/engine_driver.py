"""A process of its own that does one thing to a warehouse on either engine, for the kill tests:
`python -m strata_dagster_tests.engine_driver SPEC.json`. The spec says the engine and warehouse,
the source rows to write first (if any), then what to do:

- `run`: build the project (a `STRATA_KILL_AT` step in the environment kills this process there);
- `inspect`: print, as one JSON line, the interrupted publications a reader finds and every live
  view's rows (as text, sorted), without writing anything;
- `open`: open the warehouse for writing and close it (a writer repairs what a crash left).

One JVM per process on Spark: the tests keep these few.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from strata_dagster.compile.relations import model_view
from strata_dagster.engine.run import run_project
from strata_dagster.warehouse.engines import choose_engine, engine_choice
from strata_dagster.warehouse.session import WarehouseError, open_session
from strata_dagster_tests.engines_support import EngineUnderTest


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    name, warehouse = spec["engine"], Path(spec["warehouse"])
    choose_engine(engine_choice(name))
    spark = None
    if name == "spark":
        from strata_dagster.spark.connect import local_session

        spark = local_session(warehouse)
        spark.sparkContext.setLogLevel("OFF")
    engine = EngineUnderTest(name, warehouse, warehouse.parent, spark)
    for table, (columns, rows) in spec.get("tables", {}).items():
        engine.write_table(table, [tuple(column) for column in columns], [tuple(row) for row in rows])
    action = spec["action"]
    if action == "run":
        run_project(spec["project"], warehouse)
    elif action == "open":
        with open_session(warehouse):
            pass
    elif action == "inspect":
        print(json.dumps(inspect(warehouse, spec["models"])))


def inspect(warehouse: Path, models: list[str]) -> dict[str, object]:
    with open_session(warehouse, read_only=True) as session:
        interrupted = [commit.commit_id for commit in getattr(session, "interrupted", [])]
        views = {}
        for model in models:
            try:
                rows = session.read_rows(model_view(model))[1]
            except WarehouseError:
                views[model] = None
                continue
            views[model] = sorted(json.dumps([str(value) for value in row]) for row in rows)
    return {"interrupted": interrupted, "views": views}


if __name__ == "__main__":
    main(sys.argv[1])
