"""Dagster's SQLite event storage, writing a batch of asset events in one transaction per database.

Why: Dagster's `SqliteEventLogStorage` writes every event on its own: a new connection and a
transaction on the run's database, then another on the index database for an asset event (about
7-10 ms each). A year of daily partitions is 365 materializations of the model and 365 observations
of its partitions companion, the largest part of a first load through Dagster (docs/dagster.md,
"The Dagster path's cost"). Inside `batched_asset_events(instance)` (the IO manager's per-partition
events) this storage keeps the asset events it is given and writes them together when the block
ends, in the order they came; any other event first writes what was kept, so the run's log keeps
its order. Dagster's own batches (`DAGSTER_EVENT_BATCH_SIZE`) use the same one-transaction write.

How it is chosen: `dagster.yaml` names `StrataInstance` as the `instance_class`. It changes only
the default storage (the same SQLite files under the instance's folder as Dagster's default, so an
instance can switch back and forth); a `storage:` section (Postgres, say) still wins, and with
another storage `batched_asset_events` changes nothing. The same instance class takes dagster.yaml's
`strata:` section: `backfill_daemon_interval_seconds` shortens the backfill daemon's wait between
iterations (`_set_backfill_daemon_interval`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg
import dagster._daemon.controller as daemon_controller
from dagster._core.events import ASSET_EVENTS, BATCH_WRITABLE_EVENTS, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.ref import InstanceRef
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._serdes import ConfigurableClassData, serialize_value
from dagster._utils import mkdir_p
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from strata_dagster.orchestration.run_launcher import start_fork_server_in_the_daemon

EVENT_BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"  # Dagster's (dagster._core.instance.utils)
DEFAULT_EVENT_BATCH_SIZE = 1000
BACKFILL_INTERVAL_KEY = "backfill_daemon_interval_seconds"
DEQUEUE_INTERVAL_KEY = "dequeue_interval_seconds"
# Dagster's interval daemons wait in steps of half a second (dagster._daemon.daemon.IntervalDaemon)
SHORTEST_DEQUEUE_INTERVAL = 0.5
KEPT_ENGINES = 32  # shards whose SQLAlchemy engine is kept (the index, the runs being written)


class StrataSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` that writes a batch of asset events in one transaction per database
    (the run's and the index), and keeps the asset events of a `batched()` block for one batch."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: dict[str, Engine] = {}  # before Dagster's __init__, which connects
        super().__init__(base_dir, inst_data)
        self._kept = threading.local()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        """Dagster's `_connect` with the shard's engine kept instead of a new one per write (an
        engine costs about a third of a small write, and its compiled statements are lost with it).
        The engine pools nothing (`NullPool`): every write still opens and closes its own SQLite
        connection, so the database file is checkpointed as before and the webserver's watch of a
        run's file (its live log) sees each write."""
        with self._db_lock:
            engine = self._engines.get(shard)
            if engine is None:
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    poolclass=NullPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
                )
                self._engines[shard] = engine
                if len(self._engines) > KEPT_ENGINES:  # a webserver reads many runs' files: the oldest go
                    self._engines.pop(next(iter(self._engines))).dispose()
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry, event_id: int | None) -> None:
        with self.index_connection() as conn:
            self._write_check_planned(conn, event, event_id)

    def _write_check_planned(self, conn: Connection, event: EventLogEntry, event_id: int | None) -> None:
        """Dagster's rows for a check's planned evaluation (one per partition of the check's run),
        with the event serialized once, not once per row: a check of a year of days serialized its
        event 365 times. The rows go as parameters of one cached statement: a multi-row VALUES
        built per call was compiled again for every check (about 70 ms for 365 rows, cProfiled)."""
        planned = event.get_dagster_event().event_specific_data
        partition_keys = (
            planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
        )
        serialized = serialize_value(event)
        timestamp = self._event_insert_timestamp(event)
        conn.execute(
            AssetCheckExecutionsTable.insert(),
            [
                dict(
                    asset_key=planned.asset_key.to_string(),
                    check_name=planned.check_name,
                    partition=partition_key,
                    run_id=event.run_id,
                    execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
                    evaluation_event=serialized,
                    evaluation_event_timestamp=timestamp,
                    evaluation_event_storage_id=event_id,
                )
                for partition_key in partition_keys
            ],
        )

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Keep the asset events this thread stores in the block, and write them as one batch
        when it ends (also when it raises: what was logged is recorded). Nested blocks join the
        outer one."""
        if getattr(self._kept, "events", None) is not None:
            yield
            return
        self._kept.events = []
        try:
            yield
        finally:
            self._write_kept()
            self._kept.events = None

    def store_event(self, event: EventLogEntry) -> None:
        kept: list[EventLogEntry] | None = getattr(self._kept, "events", None)
        if kept is None:
            super().store_event(event)
        elif _is_batch_writable(event):
            kept.append(event)
        else:
            self._write_kept()  # what came before it is written before it
            super().store_event(event)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Each run of consecutive asset events and checks' planned evaluations together
        (`_write_together`); any other event on its own, in order."""
        together: list[EventLogEntry] = []
        for event in events:
            if _is_batch_writable(event):
                together.append(event)
                continue
            self._write_together(together)
            together = []
            super().store_event(event)
        self._write_together(together)

    def _write_together(self, events: Sequence[EventLogEntry]) -> None:
        """Asset events and checks' planned evaluations in one transaction on each run's database,
        then one on the index: the rows `store_event` writes for each (its row in both; an asset
        event's tags; a planned check's execution rows), and each asset's entry as the last of its
        events of each type leaves it (an event's entry replaces the one before, of the same asset
        and type)."""
        if not events:
            return
        rows = [self._event_to_row(event) for event in events]  # each event serialized once
        by_run: dict[str, list[dict[str, Any]]] = {}
        for event, row in zip(events, rows, strict=True):
            by_run.setdefault(event.run_id, []).append(row)
        for run_id, run_rows in by_run.items():
            with self.run_connection(run_id) as conn:
                conn.execute(SqlEventLogStorageTable.insert(), run_rows)
        with self.index_transaction() as conn:
            # One compiled statement for all the rows, their ids returned in the rows' order
            # (SQLAlchemy runs it row by row on SQLite to keep that order): a statement built per
            # row, `.values(**row)`, cost 56-68 ms for 365 rows against 9-15 ms.
            inserted = conn.execute(
                SqlEventLogStorageTable.insert().returning(
                    SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
                ),
                rows,
            )
            event_ids = [row.id for row in inserted]
            asset_events: list[EventLogEntry] = []
            asset_event_ids: list[int] = []
            last: dict[tuple[str, str], int] = {}  # (asset, event type) -> its last event's position
            for event, event_id in zip(events, event_ids, strict=True):
                dagster_event = event.get_dagster_event()
                if dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED:
                    self._write_check_planned(conn, event, event_id)
                    continue
                asset_events.append(event)
                asset_event_ids.append(event_id)
                last[(str(dagster_event.asset_key), dagster_event.event_type_value)] = len(asset_events) - 1
            self._store_asset_event_tags(conn, asset_events, asset_event_ids)
            for index in sorted(last.values()):
                self._store_asset_event(conn, asset_events[index], asset_event_ids[index])

    def _write_kept(self) -> None:
        kept: list[EventLogEntry] | None = getattr(self._kept, "events", None)
        if kept:
            self._kept.events = []
            self.store_event_batch(kept)


# The events Dagster may batch whose rows are the same for each event: its own row in the run's
# database and in the index; an asset event's tags and its asset's entry; a check's planned
# evaluation's rows in the checks' table.
_BATCHED_EVENTS = BATCH_WRITABLE_EVENTS & (ASSET_EVENTS | {DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED})


def _is_batch_writable(event: EventLogEntry) -> bool:
    dagster_event = event.dagster_event
    if dagster_event is None or dagster_event.event_type not in _BATCHED_EVENTS:
        return False
    return dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED or bool(
        dagster_event.asset_key
    )


class StrataSqliteRunStorage(SqliteRunStorage):
    """Dagster's `SqliteRunStorage` with its engine kept (each `connect` still opens and closes its
    own SQLite connection: nothing pooled), as `StrataSqliteEventLogStorage._connect`."""

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        engine: Engine | None = getattr(self, "_strata_engine", None)
        if engine is None:
            engine = create_engine(self._conn_string, poolclass=NullPool)
            self._strata_engine = engine
        with engine.connect() as conn, conn.begin():
            yield conn


class StrataSqliteStorage(DagsterSqliteStorage):
    """Dagster's default SQLite storage (same folders and files) with `StrataSqliteEventLogStorage`
    for its events."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self.base_dir = base_dir
        self._run_storage = StrataSqliteRunStorage.from_local(os.path.join(base_dir, "history", ""))
        self._event_log_storage = StrataSqliteEventLogStorage(os.path.join(base_dir, "history", "runs", ""))
        self._schedule_storage = SqliteScheduleStorage.from_local(os.path.join(base_dir, "schedules"))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> StrataSqliteStorage:
        base_dir = str(config_value["base_dir"])
        mkdir_p(base_dir)
        return cls(base_dir, inst_data=inst_data)


class StrataInstance(dg.DagsterInstance):
    """A `DagsterInstance` whose default storage is `StrataSqliteStorage`. Name it in dagster.yaml:

    instance_class:
      module: strata_dagster.orchestration.event_storage
      class: StrataInstance
    strata:                                   # optional
      backfill_daemon_interval_seconds: 1     # see `_set_backfill_daemon_interval`

    In the daemon's process it also starts the fork server of a `StrataRunLauncher`, if that is
    the instance's run launcher (see run_launcher.py).
    """

    def __init__(self, *args: Any, strata: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        interval = (strata or {}).get(BACKFILL_INTERVAL_KEY)
        if interval is not None:
            _set_backfill_daemon_interval(interval)
        dequeue = (strata or {}).get(DEQUEUE_INTERVAL_KEY)
        if dequeue is not None:
            _set_dequeue_interval(self.run_coordinator, dequeue)
        start_fork_server_in_the_daemon(self)

    def _get_event_batch_size(self) -> int:
        """Dagster batches some events it logs together (a run's planned materializations: one per
        partition; a ranged output's events) only when `DAGSTER_EVENT_BATCH_SIZE` is set: on by
        default here, so the storage writes them in one transaction. The variable still decides
        when set (0: off)."""
        return int(os.getenv(EVENT_BATCH_SIZE_ENV, str(DEFAULT_EVENT_BATCH_SIZE)))

    @classmethod
    def config_schema(cls) -> Mapping[str, Any]:
        """dagster.yaml's `strata:` section (Dagster passes a custom instance class's sections to
        its constructor)."""
        return {
            "strata": dg.Field(
                {
                    BACKFILL_INTERVAL_KEY: dg.Field(
                        dg.IntSource,
                        is_required=False,
                        description="Seconds the daemon's backfill loop waits between two iterations "
                        "(Dagster's constant: 30). A backfill's levels are requested one iteration apart.",
                    ),
                    DEQUEUE_INTERVAL_KEY: dg.Field(
                        dg.Float,
                        is_required=False,
                        description="Seconds between two looks of the run queue's daemon for runs to "
                        "launch, at least 0.5 (run_queue's own setting takes whole seconds only).",
                    ),
                },
                is_required=False,
            )
        }

    @staticmethod
    def config_defaults(base_dir: str) -> Mapping[str, ConfigurableClassData | None]:
        defaults = dict(InstanceRef.config_defaults(base_dir))
        defaults["storage"] = ConfigurableClassData(
            __name__,
            StrataSqliteStorage.__name__,
            json.dumps({"base_dir": base_dir}),  # JSON is YAML: no YAML writer needed
        )
        return defaults


def _set_backfill_daemon_interval(seconds: int) -> None:
    """Make the daemon's backfill loop wait `seconds` between iterations.

    Why: Dagster requests a backfill's runs level by level, one iteration of the backfill daemon
    apart, and the loop waits `DEFAULT_DAEMON_INTERVAL_SECONDS` (30) minus its own time: a constant
    of Dagster 1.13 that no setting changes. *Materialize all* of the example (three partitions
    definitions, so three levels) spent about 60-90 s in those waits (docs/dagster.md, "The Dagster
    path's cost"). The loop reads the constant when it starts, after the daemon's process built its
    instance, so this instance sets it. The same constant is the automation daemon's tick when
    dagster.yaml sets no `auto_materialize: minimum_interval_seconds` (ours sets it). Checked against
    the pinned Dagster by test_dagster_event_storage.py."""
    if seconds < 1:
        raise dg.DagsterInvalidConfigError(
            f"strata: {BACKFILL_INTERVAL_KEY} must be at least 1 second", [], seconds
        )
    daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS = seconds


def _set_dequeue_interval(coordinator: object, seconds: float) -> None:
    """Make the run queue's daemon look for runs to launch every `seconds`.

    Why: every run launched from the UI waits in the queue (the `duckdb` pool: one strata step at a
    time) until the queue's daemon looks, on average half its interval; *Materialize all* of the
    example waits so three times, one run after the other (docs/dagster.md, "The Dagster path's
    cost"). Dagster's `run_queue: dequeue_interval_seconds` takes whole seconds, while its interval
    daemons wait in steps of half a second, so 0.5 is the shortest interval that means what it
    says. The daemon reads the interval from the instance's run coordinator when it is created,
    after this instance was built. Checked against the pinned Dagster by
    test_dagster_event_storage.py."""
    if seconds < SHORTEST_DEQUEUE_INTERVAL:
        raise dg.DagsterInvalidConfigError(
            f"strata: {DEQUEUE_INTERVAL_KEY} must be at least {SHORTEST_DEQUEUE_INTERVAL} seconds",
            [],
            seconds,
        )
    if not isinstance(coordinator, QueuedRunCoordinator):
        raise dg.DagsterInvalidConfigError(
            f"strata: {DEQUEUE_INTERVAL_KEY} needs Dagster's queued run coordinator (a `run_queue:` "
            f"section), not {type(coordinator).__name__}",
            [],
            seconds,
        )
    coordinator._dequeue_interval_seconds = seconds  # type: ignore[assignment]  # an int in Dagster's typing


@contextmanager
def batched_asset_events(instance: dg.DagsterInstance) -> Iterator[None]:
    """Within the block, the asset events this thread logs are written together when it ends, if
    the instance's storage is `StrataSqliteEventLogStorage`; otherwise nothing changes. A read of
    those events (their latest tags, say) belongs after the block."""
    storage = instance.event_log_storage
    if isinstance(storage, StrataSqliteEventLogStorage):
        with storage.batched():
            yield
    else:
        yield
