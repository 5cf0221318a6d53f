"""The SQLite event storage the shipped dagster.yaml names (orchestration.event_storage): a
partitioned model's per-partition events written in one transaction record exactly what Dagster's
own SQLite storage records event by event (the run's log in order, the per-partition tags staleness
reads, the asset entries the UI lists), on real instances in `tmp_path`."""

import logging
import time

import dagster as dg
import dagster._daemon.controller as daemon_controller
import pytest
import yaml
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._daemon.backfill import execute_backfill_iteration_loop
from dagster._daemon.controller import create_daemon_of_type
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from strata_dagster import build_definitions
from strata_dagster.orchestration.event_storage import (
    BACKFILL_INTERVAL_KEY,
    DEQUEUE_INTERVAL_KEY,
    StrataInstance,
    StrataSqliteEventLogStorage,
    batched_asset_events,
)
from strata_dagster_tests.dagster_support import (
    REPO,
    SHOP,
    IdleWorkspace,
    change_order,
    daemon_gap,
    execute_assets,
    make_small_shop,
    materialize_everything,
    stale_set,
)

SHIPPED = (REPO / "dagster.yaml", SHOP / "dagster.yaml")
COMPANION = dg.AssetKey("stg_orders__by_day")
PARTITIONED = (dg.AssetKey("daily_revenue"), dg.AssetKey("monthly_revenue"))
DAGSTERS_INTERVAL = daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS  # 30 in Dagster 1.13


def instance_at(home, *, batched: bool = True, extra: str = "") -> dg.DagsterInstance:
    """An instance in `home` with the repository's dagster.yaml (without its instance_class and
    strata sections when not `batched`: Dagster's own storage), plus `extra` lines."""
    home.mkdir()
    settings = yaml.safe_load((REPO / "dagster.yaml").read_text())
    if not batched:
        del settings["instance_class"], settings["strata"]
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings) + extra)
    return dg.DagsterInstance.from_config(str(home))


@pytest.mark.parametrize("config", SHIPPED, ids=["repository", "example"])
def test_the_shipped_dagster_yaml_uses_the_batching_storage_in_dagsters_default_files(tmp_path, config):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(config.read_text())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance, StrataInstance)
        assert isinstance(instance.event_log_storage, StrataSqliteEventLogStorage)
        assert (home / "history" / "runs" / "index.db").exists()  # where Dagster's default keeps it
        assert (home / "history" / "runs.db").exists()


def test_a_storage_section_in_dagster_yaml_still_wins(tmp_path):
    other = tmp_path / "elsewhere"
    extra = f"\nstorage:\n  sqlite:\n    base_dir: {other}\n"
    with instance_at(tmp_path / "home", extra=extra) as instance:
        storage = instance.event_log_storage
        assert type(storage) is SqliteEventLogStorage
        assert (other / "history" / "runs" / "index.db").exists()
        with batched_asset_events(instance):  # another storage: nothing changes
            instance.report_runless_asset_event(dg.AssetMaterialization("lonely"))
            assert instance.get_latest_materialization_event(dg.AssetKey("lonely")) is not None


def _iteration_gap(instance: dg.DagsterInstance) -> float:
    """Dagster's own backfill loop (no backfill to run)."""
    return daemon_gap(
        lambda shutdown: execute_backfill_iteration_loop(
            IdleWorkspace(instance), logging.getLogger("test"), shutdown
        )
    )


def _queue_gap(instance: dg.DagsterInstance) -> float:
    """Dagster's own run-queue daemon (no run queued)."""
    daemon = create_daemon_of_type(QueuedRunCoordinatorDaemon.daemon_type(), instance)
    return daemon_gap(lambda shutdown: daemon.core_loop(IdleWorkspace(instance), shutdown))


def test_the_shipped_dagster_yaml_shortens_the_backfill_daemons_wait_between_iterations(tmp_path):
    shipped = (REPO / "dagster.yaml").read_text()
    assert f"strata:\n  {BACKFILL_INTERVAL_KEY}: 1\n" in shipped
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(shipped)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert isinstance(instance, StrataInstance)
            assert 0.5 < _iteration_gap(instance) < 10  # Dagster's own wait: 30 s
    finally:
        daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS = DAGSTERS_INTERVAL
    (home / "dagster.yaml").write_text(
        shipped.replace(f"{BACKFILL_INTERVAL_KEY}: 1", f"{BACKFILL_INTERVAL_KEY}: 0")
    )
    with pytest.raises(dg.DagsterInvalidConfigError, match="at least 1 second"):
        dg.DagsterInstance.from_config(str(home))
    assert daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS == DAGSTERS_INTERVAL


def test_the_shipped_dagster_yaml_looks_at_the_run_queue_every_half_second(tmp_path):
    shipped = (REPO / "dagster.yaml").read_text()
    assert f"  {DEQUEUE_INTERVAL_KEY}: 0.5\n" in shipped
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(shipped)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert 0.4 < _queue_gap(instance) < 0.9  # run_queue's whole second: 1.0
    finally:
        daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS = DAGSTERS_INTERVAL
    instance_class = (
        "instance_class:\n  module: strata_dagster.orchestration.event_storage\n  class: StrataInstance\n"
    )
    for extra, error in (
        ("", "at least 0.5 seconds"),
        (
            "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n",
            "needs Dagster's queued run coordinator",
        ),
    ):
        value = 0.2 if not extra else 0.5
        (home / "dagster.yaml").write_text(
            f"{instance_class}strata:\n  {DEQUEUE_INTERVAL_KEY}: {value}\n{extra}"
        )
        with pytest.raises(dg.DagsterInvalidConfigError, match=error):
            dg.DagsterInstance.from_config(str(home))


def _run_log(instance: dg.DagsterInstance, run_id: str) -> list[tuple]:
    """The run's events in storage order, without what differs between two runs (ids, times)."""
    found = []
    for record in instance.get_records_for_run(run_id, limit=100_000).records:
        event = record.event_log_entry.dagster_event
        if event is None:
            found.append(("log", record.event_log_entry.user_message.split(" ")[0]))
            continue
        if event.event_type in (DagsterEventType.ENGINE_EVENT, DagsterEventType.LOGS_CAPTURED):
            continue  # timings and pids in their messages
        found.append((event.event_type_value, event.step_key, str(event.asset_key), event.partition))
    return found


def _comparable(record) -> tuple:
    """An asset event as staleness reads it: its partition and tags (an input's event pointer is a
    storage id: only whether there is one), and its metadata's keys."""
    event = record.asset_materialization or record.asset_observation
    tags = {
        key: (value if "input_event_pointer" not in key else bool(value))
        for key, value in (event.tags or {}).items()
    }
    return event.partition, tags, sorted(event.metadata)


def _recorded(instance: dg.DagsterInstance, defs: dg.Definitions) -> dict:
    """What staleness and the UI read back: per-partition versions of the partitioned models and the
    companion, every asset's materialized partitions, latest event and data version."""
    storage = instance.event_log_storage
    found: dict = {}
    for key in PARTITIONED:
        found[f"{key.to_user_string()} versions"] = storage.get_latest_tags_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, ["dagster/data_version"]
        )
        records = instance.fetch_materializations(key, limit=10_000).records
        found[f"{key.to_user_string()} events"] = [_comparable(record) for record in records]
    found["companion versions"] = storage.get_latest_tags_by_partition(
        COMPANION, DagsterEventType.ASSET_OBSERVATION, ["dagster/data_version"]
    )
    records = instance.fetch_observations(COMPANION, limit=10_000).records
    found["companion events"] = [_comparable(record) for record in records]
    graph = defs.resolve_asset_graph()
    for check in graph.asset_check_keys:
        # Each check's executions (one per partition of a partitioned run), as the UI lists them.
        history = storage.get_asset_check_execution_history(check, limit=10_000)
        found[check.to_user_string()] = sorted(
            (item.status.value, item.partition, type(item.event.dagster_event.event_specific_data).__name__)
            for item in history
        )
    for key in graph.get_all_asset_keys():
        latest = instance.get_latest_materialization_event(key)
        record = instance.get_latest_data_version_record(key)
        found[key.to_user_string()] = (
            sorted(instance.get_materialized_partitions(key)),
            latest.dagster_event.partition if latest else None,
            (record.event_log_entry.tags or {}).get("dagster/data_version") if record else None,
        )
    return found


def test_a_first_load_records_with_batches_what_dagsters_storage_records_event_by_event(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    recorded, logs, stale = [], [], []
    for name, path, batched in (("dagster", warehouse, False), ("strata", copy, True)):
        defs = build_definitions(project, warehouse=path)
        with instance_at(tmp_path / name, batched=batched) as instance:
            assert isinstance(instance.event_log_storage, StrataSqliteEventLogStorage) is batched
            materialize_everything(defs, instance)
            changed = stale_set(defs, instance)
            change_order(path, 17)
            assert execute_assets(defs, instance, ["orders", "customers"]).success
            assert execute_assets(defs, instance, ["stg_orders"]).success
            recorded.append(_recorded(instance, defs))
            logs.append([_run_log(instance, run.run_id) for run in reversed(instance.get_runs())])
            stale.append((changed, stale_set(defs, instance)))
    dagster, strata = recorded
    assert len(strata["daily_revenue versions"]) == 40 and len(strata["companion versions"]) == 40
    assert strata == dagster
    # A check of the daily model was planned for its 40 partitions: one execution row each.
    assert len([row for row in strata["daily_revenue:strata_unique"] if row[1] is not None]) == 40
    assert logs[1] == logs[0]
    planned = [
        item
        for run in logs[1]
        for item in run
        if item[0] == "ASSET_MATERIALIZATION_PLANNED" and item[2] == str(PARTITIONED[0])
    ]
    assert len(planned) == 40  # Dagster's batch of one planned event per partition, written as one
    assert stale[1] == stale[0]
    before, after = stale[1]
    assert before == set()
    assert any(item.startswith("daily_revenue[") for item in after)  # the changed order's day


def _materialization(run_id: str, partition: str) -> EventLogEntry:
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        job_name="job",
        event_specific_data=StepMaterializationData(
            dg.AssetMaterialization("daily", partition=partition, tags={"dagster/data_version": partition})
        ),
    )
    return EventLogEntry(
        error_info=None, level=10, user_message="", run_id=run_id, timestamp=time.time(), dagster_event=event
    )


def _message(run_id: str, text: str) -> EventLogEntry:
    return EventLogEntry(
        error_info=None, level=20, user_message=text, run_id=run_id, timestamp=time.time(), dagster_event=None
    )


def test_a_batched_block_keeps_the_order_and_writes_what_was_logged_when_it_raises(tmp_path):
    storage = StrataSqliteEventLogStorage(str(tmp_path / "runs"))
    with pytest.raises(RuntimeError), storage.batched():
        storage.store_event(_materialization("run", "a"))
        storage.store_event(_materialization("run", "b"))
        assert storage.get_logs_for_run("run") == []  # kept for the batch
        storage.store_event(_message("run", "between"))  # not an asset event: what came before first
        storage.store_event(_materialization("other", "c"))
        storage.store_event(_materialization("run", "d"))
        with storage.batched():  # joins the outer block
            storage.store_event(_materialization("run", "e"))
        raise RuntimeError("the step failed")
    logged = [
        entry.dagster_event.partition if entry.dagster_event else entry.user_message
        for entry in storage.get_logs_for_run("run")
    ]
    assert logged == ["a", "b", "between", "d", "e"]
    assert [entry.dagster_event.partition for entry in storage.get_logs_for_run("other")] == ["c"]
    tags = storage.get_latest_tags_by_partition(
        dg.AssetKey("daily"), DagsterEventType.ASSET_MATERIALIZATION, ["dagster/data_version"]
    )
    assert tags == {key: {"dagster/data_version": key} for key in "abcde"}
    # The asset's entry names its last materialization, as event-by-event writes leave it.
    assert (
        storage.get_latest_materialization_events([dg.AssetKey("daily")])[
            dg.AssetKey("daily")
        ].dagster_event.partition
        == "e"
    )
