"""Production operation under a real `dagster-daemon` process (not in-process, no webserver): with
the `strata_materialize_stale` sensor running from the definitions, a source row changed by its
writer is picked up by the sensor and exactly the stale partition of a daily model is materialized
with no human action; so is a new daily drop of a business-versioned folder."""

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES

from strata_dagster import build_definitions
from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.opening import open_session
from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.business_support import day, make_file_project, write_file_partition
from strata_dagster_tests.support.dagster_support import (
    REPO,
    START,
    change_order,
    execute_assets,
    observe_sources,
    order_day,
)
from strata_dagster_tests.support.engine_support import SHOP

SENSOR = "strata_materialize_stale"
# Short intervals for the test's instance: the sensor itself ticks every 5 s.
DAEMON_YAML = """
run_queue:
  dequeue_interval_seconds: 1
sensors:
  use_threads: true
  num_workers: 2
"""


# One partitioned model over the shop's sources keeps each run small: the daemon's chain is an
# observation run, then one ranged run of the stale day.
DAILY_ORDERS = """
model daily_orders {
  from orders
  let order_day = cast(order_ts as date)
  group order_day
  aggregate order_count = count(*), revenue = sum(amount)
  partitioned_by: day(order_day)
}
"""


@pytest.fixture
def production(tmp_path):
    """A project of the shop's sources and `daily_orders`, materialized in an instance at `home`,
    and a code location whose definitions turn the stale sensor on."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SHOP / "sources.strata", project / "sources.strata")
    (project / "marts.strata").write_text(DAILY_ORDERS)
    warehouse = tmp_path / "warehouse.duckdb"
    write_sample_data(warehouse, 300, days=5, start=START)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text() + DAEMON_YAML)
    (tmp_path / "definitions.py").write_text(
        "import dagster as dg\nfrom strata_dagster import build_definitions\n"
        f"defs = build_definitions({str(project)!r}, warehouse={str(warehouse)!r}, "
        "stale_sensor_status=dg.DefaultSensorStatus.RUNNING)\n"
    )
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: definitions.py\n      location_name: shop\n"
    )
    defs = build_definitions(project, warehouse=warehouse)
    keys = defs.resolve_asset_graph().get(dg.AssetKey("daily_orders")).partitions_def.get_partition_keys()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        observe_sources(defs, instance)
        assert execute_assets(defs, instance, ["daily_orders"], partitions=(keys[0], keys[-1])).success
    return tmp_path, home, warehouse


def test_the_daemon_materializes_a_changed_sources_stale_partition_unattended(production):
    root, home, warehouse = production
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    log = root / "daemon.log"
    with dg.DagsterInstance.from_config(str(home)) as instance, log.open("w") as output:
        daemon = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
            cwd=root,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait(lambda: _sensor_ticks(instance), 90, "the sensor's first tick", log)
            order = paid_order(warehouse)
            day = order_day(warehouse, order)
            mark = instance.event_log_storage.get_maximum_record_id() or 0
            _retry_while_locked(lambda: change_order(warehouse, order))

            def rebuilt() -> set[str] | None:
                days = _materialized_partitions(instance, "daily_orders", mark)
                return days or None

            # Generous for a loaded machine: every run is a new process importing Dagster and the project.
            assert _wait(rebuilt, 300, f"daily_orders[{day}] to be materialized", log) == {day}
            launched = [run for run in instance.get_runs() if run.tags.get("dagster/sensor_name") == SENSOR]
            # It observed the changed source, then rebuilt the stale day: runs named by what they do.
            purposes = {(run.job_name, run.tags.get("strata/purpose")) for run in launched}
            assert {
                ("strata_observe_sources", "observe"),
                ("strata_daily_orders_partitions", "rebuild"),
            } <= purposes
            assert not [run.run_id for run in launched if run.status == dg.DagsterRunStatus.FAILURE]
        finally:
            _stop(daemon)


def _sensor_ticks(instance: dg.DagsterInstance) -> bool:
    for state in instance.all_instigator_state():
        if state.name == SENSOR:
            return bool(instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1))
    return False


def _materialized_partitions(instance: dg.DagsterInstance, name: str, after: int) -> set[str | None]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), after_storage_id=after), limit=1000
    ).records
    return {record.partition_key for record in records}


def _retry_while_locked(write, timeout: float = 30) -> None:
    """The sensor's reads hold the warehouse for an instant; a writer retries, as a loader would."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            write()
            return
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _wait(predicate, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{log.read_text()[-4000:]}")


def _stop(process: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGINT, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def test_the_daemon_picks_up_a_new_daily_drop_and_builds_only_its_partition(tmp_path):
    """A business-versioned folder of daily drops under a real daemon: the first tick builds what is
    there; a new folder with its `_SUCCESS` is observed by the sensor's tick itself (no observation
    run) and exactly that day of `daily_totals` is materialized, with `events_log` appended."""
    start = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=10)
    project, warehouse = make_file_project(tmp_path, "  complete_when: '_SUCCESS'", start=start)
    for index in range(2):
        write_file_partition(project, index, 5, marker="_SUCCESS", start=start)
    with open_session(warehouse):
        pass
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text() + DAEMON_YAML)
    (tmp_path / "definitions.py").write_text(
        "import dagster as dg\nfrom strata_dagster import build_definitions\n"
        f"defs = build_definitions({str(project)!r}, warehouse={str(warehouse)!r}, "
        "stale_sensor_status=dg.DefaultSensorStatus.RUNNING)\n"
    )
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: definitions.py\n      location_name: drops\n"
    )
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    log = tmp_path / "daemon.log"
    first_days = {day(index, start).isoformat() for index in range(2)}
    with dg.DagsterInstance.from_config(str(home)) as instance, log.open("w") as output:
        daemon = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
            cwd=tmp_path,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            built = _wait(
                lambda: (
                    _materialized_partitions(instance, "daily_totals", 0) == first_days
                    and _materialized_partitions(instance, "events_log", 0) == {None}
                    and not _unfinished(instance)
                ),
                300,
                "the first build of what is there",
                log,
            )
            assert built
            mark = instance.event_log_storage.get_maximum_record_id() or 0
            new_day = day(2, start).isoformat()
            write_file_partition(project, 2, 4, marker="_SUCCESS", start=start)
            _wait(
                lambda: (
                    _materialized_partitions(instance, "events_log", mark)
                    and _materialized_partitions(instance, "daily_totals", mark)
                    and not _unfinished(instance)
                ),
                300,
                f"daily_totals[{new_day}] and events_log",
                log,
            )
            assert _materialized_partitions(instance, "daily_totals", mark) == {new_day}
            launched = [run for run in instance.get_runs() if run.tags.get("dagster/sensor_name") == SENSOR]
            assert {run.tags.get("strata/purpose") for run in launched} == {"rebuild"}  # no observation run
            assert not [run.run_id for run in launched if run.status == dg.DagsterRunStatus.FAILURE]
            assert len(launched) == 4  # two for what was there, two for the new day
        finally:
            _stop(daemon)
    rows = duckdb.connect(str(warehouse), read_only=True)
    try:
        assert rows.execute("SELECT count(*) FROM main.v_events_log").fetchone() == (14,)
    finally:
        rows.close()


def _unfinished(instance: dg.DagsterInstance) -> bool:
    return bool(instance.get_runs(filters=dg.RunsFilter(statuses=NOT_FINISHED_STATUSES)))
