"""A new partition whose run failed is requested again: the stale sensor observes a new partition
and launches its runs in the same tick, so the source's recorded version is already the new one
when the next tick comes; a partition the failed runs did not consume must still be launched
again once nothing reading the source runs (a real Dagster instance on disk, real failed runs)."""

import os

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.backends.duckdb.limits import MEMORY_LIMIT_ENV
from strata_dagster.backends.opening import open_session
from strata_dagster_tests.orchestration.test_dagster_business import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    DaemonTicks,
    _instance,
    _materialized,
    _today_minus,
)
from strata_dagster_tests.support.business_support import day, make_file_project, write_file_partition
from strata_dagster_tests.support.dagster_support import launch_in_process
from strata_dagster_tests.support.engine_support import sql


class FailingTicks(DaemonTicks):
    """Ticks whose runs may fail: `failing` makes every launched run fail as a misconfigured
    worker would (an unreadable memory limit, E-coded before anything is written)."""

    failing: bool | str = False  # every run, or the runs of this job

    def _launch(self, request: dg.RunRequest) -> dg.DagsterRun:
        names = [key.to_user_string() for key in request.asset_selection]
        start = request.tags.get(RANGE_START_TAG)
        partitions = (start, request.tags[RANGE_END_TAG]) if start else None
        tags = {k: v for k, v in request.tags.items() if k not in (RANGE_START_TAG, RANGE_END_TAG)}
        before = os.environ.get(MEMORY_LIMIT_ENV)
        if self.failing is True or self.failing == request.job_name:
            os.environ[MEMORY_LIMIT_ENV] = "plenty"
        try:
            return launch_in_process(
                self.defs, self.instance, names, job=request.job_name, partitions=partitions, tags=tags
            )
        finally:
            if before is None:
                os.environ.pop(MEMORY_LIMIT_ENV, None)
            else:
                os.environ[MEMORY_LIMIT_ENV] = before


def _two_days_consumed_so_far(tmp_path):
    """A file source with two complete days, its ticks ready (the first tick not yet run)."""
    start = _today_minus(20)
    project, warehouse = make_file_project(tmp_path, "  complete_when: '_SUCCESS'", start=start)
    for index in range(2):
        write_file_partition(project, index, 5, marker="_SUCCESS", start=start)
    with open_session(warehouse):
        pass
    defs = build_definitions(project, warehouse=warehouse)
    return start, project, warehouse, FailingTicks(defs, _instance(tmp_path))


def test_a_new_partition_whose_runs_failed_is_launched_again_on_the_next_tick(tmp_path):
    start, project, warehouse, tick = _two_days_consumed_so_far(tmp_path)
    tick()
    assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in tick.launched)
    assert not tick().run_requests

    write_file_partition(project, 2, 4, marker="_SUCCESS", start=start)
    new_day = day(2, start).isoformat()
    tick.failing = True
    tick()
    assert len(tick.launched) == 2
    assert all(run.status == dg.DagsterRunStatus.FAILURE for run in tick.launched)
    tick.failing = False
    tick()  # the worker is fixed: the same partition is launched again, and built
    assert [_materialized(tick.instance, run) for run in tick.launched] == [
        [("daily_totals", new_day, "partitions")],
        [("events_log", None, "delta")],
    ]
    assert sql(warehouse, "SELECT count(*) FROM main.v_events_log WHERE dt = ?", [day(2, start)]) == [(4,)]
    assert not tick().run_requests  # consumed: nothing more


def test_a_new_partition_whose_partitioned_run_alone_failed_is_launched_again(tmp_path):
    """The unpartitioned reader's run consumed the new day (the ledger moved on); the day's run of
    the partitioned model failed: that partition is still launched again."""
    start, project, warehouse, tick = _two_days_consumed_so_far(tmp_path)
    tick()
    write_file_partition(project, 2, 4, marker="_SUCCESS", start=start)
    new_day = day(2, start).isoformat()
    tick.failing = "strata_daily_totals_partitions"
    tick()
    assert sorted((run.job_name, run.status) for run in tick.launched) == [
        ("strata_daily_totals_partitions", dg.DagsterRunStatus.FAILURE),
        ("strata_unpartitioned", dg.DagsterRunStatus.SUCCESS),
    ]
    tick.failing = False
    tick()
    assert [_materialized(tick.instance, run) for run in tick.launched] == [
        [("daily_totals", new_day, "partitions")],
    ]
    assert sql(warehouse, "SELECT n FROM main.v_daily_totals WHERE dt = ?", [day(2, start)]) == [(4,)]
    assert not tick().run_requests


def test_runs_that_keep_failing_are_not_launched_again_forever(tmp_path):
    """A cause that stays (here a broken worker) fails the runs of one arrival MAX_RELAUNCHES times
    in a row; then the sensor stops launching them and says why, until someone fixes the cause and
    materializes them (or a new partition arrives)."""
    from strata_dagster.orchestration.sensors.arrivals import MAX_RELAUNCHES

    start, project, warehouse, tick = _two_days_consumed_so_far(tmp_path)
    tick()
    write_file_partition(project, 2, 4, marker="_SUCCESS", start=start)
    tick.failing = "strata_daily_totals_partitions"
    for _ in range(MAX_RELAUNCHES):
        tick()
        assert ("strata_daily_totals_partitions", dg.DagsterRunStatus.FAILURE) in [
            (run.job_name, run.status) for run in tick.launched
        ]
    quiet = tick()
    assert not quiet.run_requests
    assert f"failed {MAX_RELAUNCHES} times in a row" in (quiet.skip_message or "")
    # A new partition is a new arrival: launched (and built, the worker being fixed).
    tick.failing = False
    write_file_partition(project, 3, 2, marker="_SUCCESS", start=start)
    tick()
    assert ("strata_daily_totals_partitions", dg.DagsterRunStatus.SUCCESS) in [
        (run.job_name, run.status) for run in tick.launched
    ]
