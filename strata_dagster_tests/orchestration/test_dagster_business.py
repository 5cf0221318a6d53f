"""Dagster: a materialization of a model over a business-versioned source carries the source's
version (its last consumed partition), and the `strata_verify` job re-hashes the source's consumed
partitions against its ledger (`strata_source_ledger`). New partitions of real hive-partitioned
folders are picked up by the stale sensor in one tick: observed from the listing (per-partition
versions from the evidence), new keys for an integer-keyed source, exactly the new partitions
materialized; an incomplete folder waits, and a broken assumption is a failed check with no run."""

import datetime as dt
import shutil

import dagster as dg
import duckdb
from click.testing import CliRunner

from strata_dagster import build_definitions
from strata_dagster.backends.opening import open_session
from strata_dagster.cli.main import main
from strata_dagster.engine.reads.arrivals import partition_versions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.checks.source_checks import ASSUMPTIONS_CHECK, LEDGER_CHECK
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster.orchestration.sensors.stale_sensor import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    STALE_SENSOR_NAME,
)
from strata_dagster_tests.support.business_support import (
    day,
    make_file_project,
    make_table_project,
    write_file_partition,
    write_table_partition,
)
from strata_dagster_tests.support.dagster_support import (
    content_materializations,
    execute_assets,
    launch_in_process,
)
from strata_dagster_tests.support.engine_support import sql
from strata_dagster_tests.support.paths import REPO

VERIFY_JOB = UNSCOPED.verify_job

EVENTS_EXAMPLE = REPO / "examples" / "events"


def _ledger_check(defs, instance) -> dg.AssetCheckEvaluation:
    result = defs.resolve_job_def(VERIFY_JOB).execute_in_process(instance=instance, raise_on_error=False)
    (evaluation,) = [
        event.event_specific_data
        for event in result.all_events
        if event.event_type_value == "ASSET_CHECK_EVALUATION"
        and event.event_specific_data.check_name == LEDGER_CHECK
    ]
    return evaluation


def test_materialization_metadata_names_the_last_consumed_partition_and_the_ledger_is_checked(tmp_path):
    project, warehouse = make_table_project(tmp_path)
    for index in range(2):
        write_table_partition(warehouse, index, 3)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    assert execute_assets(defs, instance, ["events_log"]).success
    record = instance.get_latest_data_version_record(dg.AssetKey("events_log"))
    metadata = record.event_log_entry.asset_materialization.metadata
    assert metadata["strata/source_versions"].value == {"events": day(1).isoformat()}
    assert _ledger_check(defs, instance).passed
    sql(warehouse, "UPDATE raw.events SET amount = amount + 1 WHERE id = 0")  # same count and range
    failed = _ledger_check(defs, instance)
    assert not failed.passed and day(0).isoformat() in failed.description


# -- new partitions through the stale sensor --------------------------------------------------------


class DaemonTicks:
    """The stale sensor evaluated tick after tick as the sensor daemon runs it: the tick's asset
    events are recorded, then its dynamic partitions added, then its runs launched (in process, one
    after the other, as the `duckdb` pool serializes them)."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
        self.defs, self.instance, self.cursor = defs, instance, None
        self.launched: list[dg.DagsterRun] = []

    def __call__(self):
        sensor = self.defs.resolve_sensor_def(STALE_SENSOR_NAME)
        context = dg.build_sensor_context(
            instance=self.instance, repository_def=self.defs.get_repository_def(), cursor=self.cursor
        )
        result = sensor.evaluate_tick(context)
        self.cursor = result.cursor
        for event in result.asset_events:
            self.instance.report_runless_asset_event(event)
        for request in result.dynamic_partitions_requests:
            self.instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
        self.launched = [self._launch(request) for request in result.run_requests]
        return result

    def _launch(self, request: dg.RunRequest) -> dg.DagsterRun:
        names = [key.to_user_string() for key in request.asset_selection]
        start = request.tags.get(RANGE_START_TAG)
        partitions = (start, request.tags[RANGE_END_TAG]) if start else None
        tags = {k: v for k, v in request.tags.items() if k not in (RANGE_START_TAG, RANGE_END_TAG)}
        run = launch_in_process(
            self.defs, self.instance, names, job=request.job_name, partitions=partitions, tags=tags
        )
        assert run.status == dg.DagsterRunStatus.SUCCESS, run.run_id
        return run


def _materialized(instance, run: dg.DagsterRun) -> list[tuple[str, str | None, str]]:
    """(asset, partition, strata build path) of every materialization of a run."""
    found = []
    for entry in content_materializations(instance, run.run_id):
        materialization = entry.asset_materialization
        path = materialization.metadata.get(c.PATH_KEY)
        found.append(
            (
                materialization.asset_key.to_user_string(),
                materialization.partition,
                path.value if path else "",
            )
        )
    return sorted(found, key=str)


def _source_version(instance, name: str, partition: str) -> str | None:
    record = instance.get_latest_data_version_record(
        dg.AssetKey(name), is_source=True, partition_key=partition
    )
    return None if record is None else record.event_log_entry.tags.get(c.DATA_VERSION_TAG)


def _instance(tmp_path) -> dg.DagsterInstance:
    """A Dagster instance on disk (SQLite event log and run storage) in the test's folder."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    return dg.DagsterInstance.local_temp(str(home))


def _today_minus(days: int) -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=days)


def test_a_complete_folder_is_picked_up_in_one_tick_and_only_its_partition_is_built(tmp_path):
    start = _today_minus(20)
    project, warehouse = make_file_project(tmp_path, "  complete_when: '_SUCCESS'", start=start)
    for index in range(3):
        write_file_partition(project, index, 5, marker="_SUCCESS", start=start)
    with open_session(warehouse):
        pass
    defs = build_definitions(project, warehouse=warehouse)
    graph = defs.resolve_asset_graph()
    # The partitions follow the clock, not the data the definitions saw: the day after the data is
    # already a key, so a drop for it needs no reload.
    keys = graph.get(dg.AssetKey("daily_totals")).partitions_def.get_partition_keys()
    assert keys == graph.get(dg.AssetKey("events")).partitions_def.get_partition_keys()
    assert keys[0] == day(0, start).isoformat() and day(3, start).isoformat() in keys
    instance = _instance(tmp_path)
    tick = DaemonTicks(defs, instance)

    first = tick()  # never observed: every complete partition is new
    assert [_materialized(instance, run) for run in tick.launched] == [
        [("daily_totals", day(index, start).isoformat(), "full") for index in range(3)],
        [("events_log", None, "full")],
    ]
    assert {
        (e.asset_key.to_user_string(), e.partition)
        for e in first.asset_events
        if isinstance(e, dg.AssetObservation)
    } == {
        ("events__whole", None),
        *(("events", day(index, start).isoformat()) for index in range(3)),
    }
    assert not tick().run_requests and not tick().run_requests  # idle

    write_file_partition(project, 3, 4, marker="_SUCCESS", start=start)
    arrived = tick()  # one tick: observed and launched, no observation run
    new_day = day(3, start).isoformat()
    assert [_materialized(instance, run) for run in tick.launched] == [
        [("daily_totals", new_day, "partitions")],
        [("events_log", None, "delta")],
    ]
    assert all(run.tags[c.PURPOSE_TAG] == c.PURPOSE_REBUILD for run in tick.launched)
    assert {(e.asset_key.to_user_string(), e.partition) for e in arrived.asset_events} == {
        ("events__whole", None),
        ("events", new_day),
    }
    assert (
        _source_version(instance, "events", new_day)
        == partition_versions(project, warehouse, "events").versions[new_day]
    )
    appended = sql(warehouse, "SELECT count(*) FROM main.v_events_log WHERE dt = ?", [day(3, start)])
    assert appended == [(4,)]
    assert not tick().run_requests  # nothing else runs

    write_file_partition(project, 4, 3, start=start)  # no `_SUCCESS` yet: still being written
    waiting = tick()
    assert not waiting.run_requests and not waiting.asset_events
    assert not tick().run_requests
    (project / "events" / f"dt={day(4, start).isoformat()}" / "_SUCCESS").write_text("")
    tick()
    assert [_materialized(instance, run) for run in tick.launched] == [
        [("daily_totals", day(4, start).isoformat(), "partitions")],
        [("events_log", None, "delta")],
    ]

    write_file_partition(project, 1, 6, seed=1, marker="_SUCCESS", start=start)  # a consumed day rewritten
    broken = tick()
    assert not broken.run_requests
    (evaluation,) = broken.asset_events
    assert isinstance(evaluation, dg.AssetCheckEvaluation) and evaluation.check_name == ASSUMPTIONS_CHECK
    assert not evaluation.passed and evaluation.metadata["code"].value == "E052"
    assert day(1, start).isoformat() in evaluation.description and "E052" in evaluation.description
    again = tick()  # reported once; still nothing runs, and the tick says why
    assert not again.run_requests and not again.asset_events
    assert "E052" in again.skip_message
    assert instance.get_runs_count() == 6  # the two first builds, then two per arrival


def test_an_integer_keyed_source_gets_dynamic_partitions_added_by_the_sensor(tmp_path):
    project = tmp_path / "project"
    (project / "batches").mkdir(parents=True)
    (project / "batches.strata").write_text(BATCHES)
    warehouse = tmp_path / "w.duckdb"
    for batch in (1, 2, 10):
        _write_batch(project, batch)
    with open_session(warehouse):
        pass
    defs = build_definitions(project, warehouse=warehouse)
    partitions_def = defs.resolve_asset_graph().get(dg.AssetKey("batches")).partitions_def
    assert isinstance(partitions_def, dg.DynamicPartitionsDefinition)
    instance = _instance(tmp_path)
    tick = DaemonTicks(defs, instance)
    tick()
    assert instance.get_dynamic_partitions(partitions_def.name) == ["1", "2", "10"]
    assert [_materialized(instance, run) for run in tick.launched] == [[("batch_log", None, "full")]]
    assert not tick().run_requests

    _write_batch(project, 11)
    tick()
    assert instance.get_dynamic_partitions(partitions_def.name) == ["1", "2", "10", "11"]
    assert [_materialized(instance, run) for run in tick.launched] == [[("batch_log", None, "delta")]]
    assert _source_version(instance, "batches", "11") is not None
    _write_batch(project, 12, marker=False)
    assert not tick().run_requests and "12" not in instance.get_dynamic_partitions(partitions_def.name)


BATCHES = """
source batches {
  path: 'batches/*/*.parquet'
  partitioned_by: batch
  start: 1
  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true
  complete_when: '_SUCCESS'
}
model batch_log {
  from batches
  incremental
  merge_strategy: append
  cdc_column: batch
}
"""


def _write_batch(project, batch: int, *, marker: bool = True) -> None:
    folder = project / "batches" / f"batch={batch}"
    folder.mkdir()
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT range AS id FROM range(5)) TO '{folder / 'part-0.parquet'}' (FORMAT parquet)"
        )
    finally:
        con.close()
    if marker:
        (folder / "_SUCCESS").write_text("")


def test_observing_a_business_source_gives_each_complete_partition_its_evidence_version(tmp_path):
    start = _today_minus(10)
    project, warehouse = make_file_project(tmp_path, "  complete_when: '_SUCCESS'", start=start)
    for index in range(2):
        write_file_partition(project, index, 5, marker="_SUCCESS", start=start)
    write_file_partition(project, 2, 5, start=start)  # incomplete: no version
    with open_session(warehouse):
        pass
    defs = build_definitions(project, warehouse=warehouse)
    instance = _instance(tmp_path)
    assert execute_assets(defs, instance, ["events"]).success

    def versions() -> dict[str, str]:
        found = {}
        for index in range(3):
            key = day(index, start).isoformat()
            version = _source_version(instance, "events", key)
            if version is not None:
                found[key] = version
        return found

    before = versions()
    assert set(before) == {day(0, start).isoformat(), day(1, start).isoformat()}
    write_file_partition(project, 1, 6, seed=1, marker="_SUCCESS", start=start)  # another size
    assert execute_assets(defs, instance, ["events"]).success
    after = versions()
    assert after[day(0, start).isoformat()] == before[day(0, start).isoformat()]
    assert after[day(1, start).isoformat()] != before[day(1, start).isoformat()]


def test_the_events_example_next_drop_is_one_tick_for_both_of_its_sources(tmp_path):
    """`examples/events` declares one folder twice: `events` (append_only_partitions) and
    `events_last_week` (sliding_window(7)). The next day's drop, from `strata sample-data`, is one
    tick: that day of `daily_kinds`, and one run of `events_log` and `kinds_last_week` (whose window
    moves: a delta of the weighted partitions)."""
    project = tmp_path / "events"
    shutil.copytree(EVENTS_EXAMPLE, project, ignore=shutil.ignore_patterns("events", "*.duckdb*"))
    warehouse = tmp_path / "w.duckdb"

    def sample(days: int) -> None:
        written = CliRunner().invoke(
            main, ["sample-data", str(project), "--days", str(days), "--rows", "300"]
        )
        assert written.exit_code == 0, written.output

    sample(8)
    with open_session(warehouse):
        pass
    defs = build_definitions(project, warehouse=warehouse)
    tick = DaemonTicks(defs, _instance(tmp_path))
    tick()
    assert sorted(run.job_name for run in tick.launched) == [
        "strata_daily_kinds_partitions",
        "strata_unpartitioned",
    ]
    assert not tick().run_requests
    sample(9)
    tick()
    assert [_materialized(tick.instance, run) for run in tick.launched] == [
        [("daily_kinds", "2026-01-09", "partitions")],
        [("events_log", None, "delta"), ("kinds_last_week", None, "delta")],
    ]
    assert not tick().run_requests
