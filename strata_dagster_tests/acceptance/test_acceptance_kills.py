"""Kill-safety on both engines (issue 15): the driver process is killed (SIGKILL, no cleanup) at
each write step of a run. On DuckDB one transaction publishes everything, so the last good state
stays live. On Spark, which has no transactions, views are repointed one by one after the history
is logged: a crash in between leaves a publication without its commit marker, which a reader
reports and the next writer repairs (every view back to what the history says); then a run
builds the new state, equal to a full rebuild."""

import json
import os
import signal
import subprocess
import sys

import pytest

from strata_dagster_tests.support.acceptance_support import CUSTOMERS, EVENTS, FULL, Sources, make_project
from strata_dagster_tests.support.engines_support import spark_params
from strata_dagster_tests.support.spark_class_archive import driver_env
from strata_dagster_tests.support.spark_support import require_spark

STEPS = {
    "duckdb": ("snapshot_created", "views_pointed", "history_written", "committed"),
    # After the history rows are logged; after the first view is repointed (between two
    # publications): the steps only Spark has. A kill before publication leaves nothing and one
    # after the commit marker the whole run, with nothing to repair, as DuckDB's steps check; each
    # Spark step costs a JVM start, about 45 s of a CI worker.
    "spark": ("spark_history_logged", "spark_view_published"),
}
INTERRUPTED_AFTER = {"spark_history_logged", "spark_view_published"}
COMMITTED_AT = {"committed", "spark_committed"}


def tables(sources: Sources) -> dict[str, object]:
    return {
        "tables": {
            "raw.events": [list(EVENTS), [list(map(str, row)) for row in sorted(sources.events.values())]],
            "raw.customers": [
                list(CUSTOMERS),
                [list(map(str, row)) for row in sorted(sources.customers.items())],
            ],
        }
    }


def drive(tmp_path, engine_name, warehouse, project, actions, killed=False):
    """The JSON lines one driver process printed; `killed` when its actions arm a kill."""
    spec = {"engine": engine_name, "warehouse": str(warehouse), "project": str(project), "actions": actions}
    spec["full"] = FULL
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    result = subprocess.run(
        [sys.executable, "-m", "strata_dagster_tests.support.engine_driver", str(path)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(driver_env() if engine_name == "spark" else {})},
    )
    expected = -signal.SIGKILL if killed else 0
    assert result.returncode == expected, (actions[-2:], result.stdout, result.stderr[-3000:])
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("engine_name", spark_params())
def test_a_kill_at_any_write_step_leaves_a_state_the_next_writer_makes_whole(engine_name, tmp_path):
    if engine_name == "spark":
        require_spark()
    warehouse = tmp_path / ("w.duckdb" if engine_name == "duckdb" else "spark-warehouse")
    project = make_project(tmp_path)
    sources = Sources()
    for cust, status, value in ((0, "open", 1), (1, "paid", 4), (2, "void", 2)):
        sources.insert(cust, status, value)
    # Each process checks and repairs what the last kill left, then changes the sources and is
    # killed at the next step: one JVM per step on Spark, not two.
    steps = STEPS[engine_name]
    first = [tables(sources), "run", "inspect", *kill_next(sources, 0, steps[0])]
    (live,) = drive(tmp_path, engine_name, warehouse, project, first, killed=True)
    assert live["views"] == live["full"]
    for number, step in enumerate(steps):
        before = live["views"]
        then = kill_next(sources, number + 1, steps[number + 1]) if number + 1 < len(steps) else []
        actions = ["inspect", "open", "inspect", "run", "inspect", *then]
        seen, repaired, live = drive(tmp_path, engine_name, warehouse, project, actions, killed=bool(then))
        assert_made_whole(step, before, seen, repaired, live)


def kill_next(sources: Sources, number: int, step: str) -> list[object]:
    """Change the sources, then run them into a kill at `step`."""
    sources.apply(("insert", [(number % 3, "paid", 10 + number, 1)]))
    sources.apply(("update", [(0, "paid", 20 + number)]))
    return [tables(sources), {"kill_at": step}, "run"]


def assert_made_whole(step, before, seen, repaired, live):
    assert bool(seen["interrupted"]) == (step in INTERRUPTED_AFTER), (step, seen["interrupted"])
    # Killed after its commit, the run is published whole; before it, none of it is visible
    # (on Spark, once the next writer repointed what the crash left half done).
    whole = seen["full"] if step in COMMITTED_AT else before
    if step not in INTERRUPTED_AFTER:
        assert seen["views"] == whole, step
    assert repaired["interrupted"] == [] and repaired["views"] == whole, step
    assert live["views"] == live["full"], step
