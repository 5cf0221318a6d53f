"""After a warehouse commit, each live model of the branch as the current state of its Iceberg table.

Runs after the warehouse's transaction committed (pins passed, views and history written), for
every live model of the branch, not only the run's: a table a failed or killed publication left
behind catches up here, at the next run. Each table changes in one Iceberg commit, so a reader
of one table sees its state before or after; two tables commit one after the other (the
consistent read of a run is `strata connect --iceberg --run RUN`). Off unless
`STRATA_ICEBERG_CATALOG` names a catalog (backends/iceberg/catalog.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.errors import E_ICEBERG, StrataError
from strata_dagster.faults import checkpoint
from strata_dagster.language.definition import Project
from strata_dagster.sql.render import snapshot_table
from strata_dagster.state.history import HistoryReader
from strata_dagster.state.states import grain_of, merge_keys_of

if TYPE_CHECKING:  # pyarrow and the target's pyiceberg: loaded only when publication is on
    import pyarrow as pa

    from strata_dagster.backends.iceberg.catalog import CatalogSetting
    from strata_dagster.backends.iceberg.publisher import IcebergTarget
    from strata_dagster.backends.iceberg.states import ModelState

ICEBERG_STEP = "iceberg_table_committed"


@dataclass(frozen=True)
class RunFacts:
    """What each table's snapshot summary says of the publication that made it."""

    entry: int
    run_id: str
    kind: str
    reason: str | None = None
    paths: Mapping[str, str] | None = None  # model -> build path this run took


@dataclass(frozen=True)
class IcebergPublished:
    """Per model: its table's current snapshot id after the publication, and what it cost."""

    snapshots: Mapping[str, int | None]
    how: Mapping[str, str]
    files_registered: int
    rows_written: int
    bytes_written: int  # data files written beside the registered ones: copies and rewrites


def catalog_statement(warehouse: Path) -> str | None:
    """The pyiceberg call that opens the catalog the warehouse publishes to (None: off)."""
    from strata_dagster.backends.iceberg.catalog import CATALOG_NAME, setting_for

    setting = setting_for(warehouse)
    if setting is None:
        return None
    return f"catalog = load_catalog({CATALOG_NAME!r}, type={setting.kind!r}, uri={setting.uri!r})"


def iceberg_table(model: str, branch: str) -> str | None:
    """The Iceberg table a model is published as (`<branch>.<model>`), None when publication is off."""
    from strata_dagster.backends.iceberg.catalog import is_enabled

    return f"{branch}.{model}" if is_enabled() else None


def _target(warehouse: Path) -> IcebergTarget | None:
    from strata_dagster.backends.iceberg.catalog import CATALOG_ENV, setting_for

    setting = setting_for(warehouse)
    if setting is None:
        return None
    try:
        from strata_dagster.backends.iceberg.publisher import IcebergTarget, open_catalog
    except ImportError as error:
        raise StrataError(
            E_ICEBERG,
            f"{CATALOG_ENV} names an Iceberg catalog, but pyiceberg cannot be imported ({error})",
            hint="install the extra: pip install 'strata_dagster[iceberg]'; or unset "
            f"{CATALOG_ENV}. The warehouse's run stands; its tables catch up at the next run",
        ) from error
    return IcebergTarget(open_catalog(setting))


def publish_branch(
    session: Session, warehouse: Path, branch: str, project: Project | None, facts: RunFacts
) -> IcebergPublished | None:
    """Every live model of `branch` published to its table; tables of retired models dropped.
    None when publication to Iceberg is off. Neither pyiceberg nor the catalog is opened when the
    last publication left every table of the branch current and neither the branch nor the
    embedded catalog's file changed since (`_unchanged_since_seen`)."""
    from strata_dagster.backends.iceberg.catalog import setting_for

    setting = setting_for(warehouse)
    if setting is None:
        return None
    reader = session.history
    pointers = reader.pointers(branch)
    if _unchanged_since_seen(reader, branch, setting, pointers):
        recorded = reader.iceberg_commits(branch)
        return IcebergPublished(
            {model: recorded[model][1] if model in recorded else None for model in pointers},
            dict.fromkeys(pointers, "current"),
            0,
            0,
            0,
        )
    target = _target(warehouse)
    if target is None:
        return None
    files: dict[str, Path] | None = None  # read once a table needs a state: a no-change run reads none
    snapshots: dict[str, int | None] = {}
    how: dict[str, str] = {}
    registered = written = copied = 0
    for model, ids in sorted(pointers.items()):
        done = target.current(branch, model, ",".join(ids))
        if done is None:
            files = session.snapshot_file_paths() if files is None else files
            done = target.publish(branch, _state(session, reader, files, project, model, ids, facts))
        snapshots[model], how[model] = done.snapshot_id, done.how
        registered += done.files_registered
        written += done.rows_written
        copied += done.bytes_written
        checkpoint(ICEBERG_STEP)
    for model in target.tables(branch):
        if model not in pointers:
            target.drop(branch, model)
    _record(session, branch, facts.entry, snapshots)
    stamp = catalog_file_stamp(setting)
    if stamp is not None:
        with session.transaction():
            session.writer.add_iceberg_catalog_seen(facts.entry, branch, setting.uri, stamp)
    return IcebergPublished(snapshots, how, registered, written, copied)


def catalog_file_stamp(setting: CatalogSetting) -> str | None:
    """The embedded SQLite catalog's file (and write-ahead log) sizes and modification times: any
    commit to any of its tables, by strata or anyone else, changes them. None for a catalog that is
    not a local file (PostgreSQL, REST): its tables are always looked at."""
    prefix = "sqlite:///"
    if setting.kind != "sql" or not setting.uri.startswith(prefix):
        return None
    database = Path(setting.uri[len(prefix) :])
    parts = []
    for path in (database, database.with_name(database.name + "-wal")):
        try:
            stat = path.stat()
        except FileNotFoundError:
            parts.append("-")
            continue
        parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
    return "/".join(parts) if parts[0] != "-" else None


def _unchanged_since_seen(
    reader: HistoryReader, branch: str, setting: CatalogSetting, pointers: Mapping[str, tuple[str, ...]]
) -> bool:
    """Whether the last publication that left every table of `branch` current (a kill before its
    record leaves none) saw the branch's views as they are now and the catalog file as it is now."""
    stamp = catalog_file_stamp(setting)
    seen = reader.iceberg_catalog_seen(branch, setting.uri) if stamp is not None else None
    if seen is None or seen[1] != stamp:
        return False
    return reader.pointers(branch, as_of_entry=seen[0]) == dict(pointers)


def _record(session: Session, branch: str, entry: int, snapshots: Mapping[str, int | None]) -> None:
    """History's row per table whose current snapshot it has not recorded yet (also those a
    killed publication committed before its own record)."""
    recorded = session.history.iceberg_commits(branch)
    new = {
        model: snapshot_id
        for model, snapshot_id in snapshots.items()
        if snapshot_id is not None and recorded.get(model, (None, None))[1] != snapshot_id
    }
    if new:
        with session.transaction():
            session.writer.add_iceberg_commits(entry, branch, new)


def expire_branches(session: Session, warehouse: Path, kept_entries: set[int]) -> int:
    """`strata gc`: every table's snapshots expired but the current and the kept runs' ones, and
    the files of its own no snapshot references deleted. Returns the snapshots expired."""
    target = _target(warehouse)
    if target is None:
        return 0
    reader = session.history
    return sum(
        target.expire(branch, model, kept_entries)
        for branch in reader.branches()
        for model in target.tables(branch)
    )


def _state(
    session: Session,
    reader: HistoryReader,
    files: Mapping[str, Path],
    project: Project | None,
    model: str,
    ids: tuple[str, ...],
    facts: RunFacts,
) -> ModelState:
    from strata_dagster.backends.iceberg.states import ModelState, StateSegment

    head = reader.snapshot(ids[-1])
    if head is None:
        raise AssertionError(f"history names snapshot {ids[-1]} but has no record of it")

    def rows_of(table: str) -> Callable[[], pa.Table]:
        return lambda: session.read_arrow(exp.select("*").from_(snapshot_table(table)))

    def file_of(table: str) -> Path | None:
        """The snapshot's file, when it holds the view's columns as the view types them (a type
        Parquet cannot hold travels there as text, and is read back through the view instead)."""
        path = files.get(table)
        if path is None:
            return None
        shown = session.read_arrow(exp.select("*").from_(snapshot_table(table)).limit(0)).schema
        import pyarrow.parquet as pq

        return path if _same_types(pq.read_schema(path), shown) else None

    segments = []
    for snapshot_id in ids:
        record = head if snapshot_id == head.snapshot_id else reader.snapshot(snapshot_id)
        if record is None:
            raise AssertionError(f"history names segment {snapshot_id} but has no record of it")
        keys_table = record.detail.get("keys_table")
        segments.append(
            StateSegment(
                snapshot_id,
                None if record.is_view else file_of(record.table_name),
                rows_of(record.table_name),
                rows_of(keys_table) if keys_table else None,
            )
        )
    definition = project.models.get(model) if project is not None else None
    properties = definition.properties if definition is not None else None
    partition = properties.partitioned_by if properties is not None else None
    contract = (properties.contract or ()) if properties is not None else ()
    path = (facts.paths or {}).get(model, "unchanged")
    summary = {
        "strata.entry": str(facts.entry),
        "strata.run-id": facts.run_id,
        "strata.kind": facts.kind,
        "strata.build-path": path,
        "strata.state": head.snapshot_id,
        **({"strata.reason": facts.reason} if facts.reason else {}),
    }
    compacted_keys = str(head.detail.get("compacted_delta_keys") or "")
    compacted_after = tuple(head.detail.get("compacted_after") or ())
    # The shortcut reads one key column: a state keyed by several is published whole.
    is_compaction = bool(compacted_keys and compacted_after) and len(merge_keys_of(head)) == 1
    return ModelState(
        model,
        tuple(segments),
        tuple(merge_keys_of(head)),
        grain_of(head),
        (partition.grain, partition.column) if partition is not None else None,
        frozenset(column.name for column in contract if column.is_not_null),
        summary,
        compacted_after=compacted_after if is_compaction else (),
        compacted_keys=rows_of(compacted_keys) if is_compaction else None,
        is_layout_known=project is not None,
    )


def _same_types(stored: pa.Schema, shown: pa.Schema) -> bool:
    import pyarrow as pa

    def normal(schema: pa.Schema) -> dict[str, pa.DataType]:
        return {item.name: pa.string() if item.type == pa.large_string() else item.type for item in schema}

    return normal(stored) == normal(shown)


@dataclass(frozen=True)
class PublishedState:
    """One model's table and the Iceberg snapshot holding a run's state of it."""

    table: str
    snapshot_id: int | None  # None: not published, or expired by gc


def published_states(
    session: Session, warehouse: Path, branch: str, entry: int | None
) -> list[PublishedState]:
    """Per live model of `branch` after `entry` (else now), its table's snapshot of that state."""
    target = _target(warehouse)
    if target is None:
        return []
    pointers = session.history.pointers(branch, as_of_entry=entry)
    return [
        PublishedState(f"{branch}.{model}", target.snapshot_of(branch, model, ",".join(ids)))
        for model, ids in sorted(pointers.items())
    ]
