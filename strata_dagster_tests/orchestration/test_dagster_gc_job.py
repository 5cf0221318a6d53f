"""The retention job: `strata_gc` (and its schedule, stopped) drops what `strata gc` drops, in a
real Dagster instance; a policy that cannot be read is a coded error at definition time."""

import shutil

import dagster as dg
import pytest

from strata_dagster import StrataGcPolicy, build_definitions
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_GC, E_GC_SCHEDULE, StrataError
from strata_dagster_tests.support.engine_support import execute, make_shop


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gc_job")
    project, warehouse = make_shop(root, rows=500)
    run_project(project, warehouse)
    for region in ("r2", "r3"):
        execute(warehouse, f"UPDATE raw.customers SET region = '{region}' WHERE customer_id = 1")
        run_project(project, warehouse, only_stale=True)
    return project, warehouse


def test_the_gc_job_drops_what_strata_gc_drops_and_its_schedule_ships_stopped(three_runs, tmp_path):
    project, warehouse = three_runs
    by_job, by_engine = tmp_path / "job.duckdb", tmp_path / "engine.duckdb"
    shutil.copy(warehouse, by_job)
    shutil.copy(warehouse, by_engine)
    policy = StrataGcPolicy(keep=1, older_than="1000w", cron="15 5 * * *")
    defs = build_definitions(project, warehouse=by_job, gc=StrataGcPolicy(keep=1))
    dg.Definitions.validate_loadable(defs)  # as a code location loads it
    schedule = defs.resolve_schedule_def("strata_gc_schedule")
    assert schedule.job_name == "strata_gc"
    assert schedule.cron_schedule == "0 4 * * 0"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    running = build_definitions(
        project, warehouse=by_job, gc=policy, gc_schedule_status=dg.DefaultScheduleStatus.RUNNING
    ).resolve_schedule_def("strata_gc_schedule")
    assert (running.cron_schedule, running.default_status) == ("15 5 * * *", dg.DefaultScheduleStatus.RUNNING)

    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("strata_gc").execute_in_process(instance=instance)
    assert result.success
    expected = gc(by_engine, 1).dropped
    assert expected  # three runs, keep one: the first two runs' snapshots go
    outputs = [
        event.event_specific_data.metadata
        for event in result.all_events
        if event.event_type == dg.DagsterEventType.STEP_OUTPUT
    ]
    assert outputs[0]["strata/dropped_snapshots"].value == len(expected)
    assert set(outputs[0]["strata/dropped"].value) == set(expected)
    dropped = {row[0] for row in execute(by_job, "SELECT snapshot_id FROM strata.dropped_snapshots")}
    assert dropped == set(expected)


def test_no_policy_no_gc_job(three_runs):
    project, warehouse = three_runs
    defs = build_definitions(project, warehouse=warehouse)
    assert "strata_gc" not in {job.name for job in defs.resolve_all_job_defs()}


@pytest.mark.parametrize(
    ("policy", "code"),
    [
        ({}, E_GC),
        ({"keep": -1}, E_GC),
        ({"older_than": "soon"}, E_GC),
        ({"keep": 3, "cron": "every sunday"}, E_GC_SCHEDULE),
    ],
)
def test_a_policy_that_cannot_be_read_is_coded(policy, code):
    with pytest.raises(StrataError) as caught:
        StrataGcPolicy(**policy)
    assert caught.value.code == code
