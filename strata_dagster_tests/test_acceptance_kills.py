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

from strata_dagster_tests.acceptance_support import CUSTOMERS, EVENTS, FULL, Sources, make_project
from strata_dagster_tests.engines_support import spark_params
from strata_dagster_tests.spark_support import require_spark

STEPS = {
    "duckdb": ("snapshot_created", "views_pointed", "history_written", "committed"),
    # Before publication; after the history rows are logged; after the first view is repointed
    # (between two publications); after the commit marker (the run is whole).
    # (A kill before publication is the same on both engines: DuckDB's steps cover it; each Spark
    # step costs two JVM starts.)
    "spark": ("spark_history_logged", "spark_view_published", "spark_committed"),
}
INTERRUPTED_AFTER = {"spark_history_logged", "spark_view_published"}
COMMITTED_AT = {"committed", "spark_committed"}


def drive(tmp_path, engine_name, warehouse, project, actions, sources=None, kill_at=None):
    spec = {"engine": engine_name, "warehouse": str(warehouse), "project": str(project), "actions": actions}
    spec["full"] = FULL
    if sources is not None:
        spec["tables"] = {
            "raw.events": [list(EVENTS), [list(map(str, row)) for row in sorted(sources.events.values())]],
            "raw.customers": [
                list(CUSTOMERS),
                [list(map(str, row)) for row in sorted(sources.customers.items())],
            ],
        }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "STRATA_KILL_AT": kill_at} if kill_at else dict(os.environ)
    result = subprocess.run(
        [sys.executable, "-m", "strata_dagster_tests.engine_driver", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if kill_at:
        assert result.returncode == -signal.SIGKILL, (kill_at, result.stdout, result.stderr[-3000:])
        return []
    assert result.returncode == 0, (actions, result.stdout, result.stderr[-3000:])
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
    (live,) = drive(tmp_path, engine_name, warehouse, project, ["run", "inspect"], sources)
    assert live["views"] == live["full"]
    for number, step in enumerate(STEPS[engine_name]):
        before = live["views"]
        sources.apply(("insert", [(number % 3, "paid", 10 + number, 1)]))
        sources.apply(("update", [(0, "paid", 20 + number)]))
        drive(tmp_path, engine_name, warehouse, project, ["run"], sources, kill_at=step)
        seen, repaired, live = drive(
            tmp_path, engine_name, warehouse, project, ["inspect", "open", "inspect", "run", "inspect"]
        )
        assert bool(seen["interrupted"]) == (step in INTERRUPTED_AFTER), (step, seen["interrupted"])
        # Killed after its commit, the run is published whole; before it, none of it is visible
        # (on Spark, once the next writer repointed what the crash left half done).
        whole = seen["full"] if step in COMMITTED_AT else before
        if step not in INTERRUPTED_AFTER:
            assert seen["views"] == whole, step
        assert repaired["interrupted"] == [] and repaired["views"] == whole, step
        assert live["views"] == live["full"], step
