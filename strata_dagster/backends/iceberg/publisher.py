"""Bring an Iceberg table to a model's live state, registering strata's Parquet files as they are.

Each table's snapshots carry strata's summary properties; the last snapshot of each commit also
carries `strata.segments`, the ids of the segments the state is made of. Publishing a state:

- the current snapshot already has it: nothing;
- a kept snapshot has it (a rollback, a promotion back): that snapshot becomes current again;
- the current state's segments begin the new state's (a delta, an append, a partition rebuild):
  only the new segments are applied, each deleting the keys or partitions it replaces and adding
  its file. Day and month partitions drop by range (whole files); keys are one overwrite of the
  files holding them, which DuckDB finds and rewrites without them (rewrite.py);
- otherwise (a full build, a compaction): every file goes, the state's files come.

All of one table's changes are one Iceberg commit: a reader sees the table before or after it.
A segment's file is registered (`add_files`, no copy) unless it has no file (a table or view
snapshot), or the table is partitioned and the file holds rows of several partitions: those
rows are written once more, one file per partition, and registered.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import DayTransform, IdentityTransform, MonthTransform, Transform

from strata_dagster.backends.iceberg.catalog import CATALOG_NAME, CatalogSetting
from strata_dagster.backends.iceberg.deletes import replaced_filter
from strata_dagster.backends.iceberg.maintenance import delete_unreferenced, ends_kept_commit, local_path
from strata_dagster.backends.iceberg.partition_files import keyed_mask, registrable, write_by_partition
from strata_dagster.backends.iceberg.rewrite import rewrite_without
from strata_dagster.backends.iceberg.states import SEGMENTS, ModelState, StateSegment
from strata_dagster.errors import E_ICEBERG, StrataError
from strata_dagster.faults import checkpoint

_TRANSFORMS: dict[str, Transform[Any, Any]] = {
    "day": DayTransform(),
    "month": MonthTransform(),
    "key": IdentityTransform(),
}
# The crash tests' step after an upsert's files are rewritten, before the commit names them.
REWRITE_STEP = "iceberg_files_rewritten"
# Grains whose replaced partitions are ranges of the column: a filter drops their files whole.
_RANGE_GRAINS = ("day", "month")
# Old metadata files go as new ones are written (the catalog keeps the current one). Files
# pyiceberg writes (an upsert's rewrite in a table not on a local path) are cut at 64 MiB of rows
# in memory, not its 512 MiB: a later upsert rewrites only the pieces holding its keys.
_TABLE_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "write.target-file-size-bytes": str(64 * 2**20),
}


@dataclass(frozen=True)
class Published:
    """What publishing one state did to its table."""

    table: str  # namespace.model
    snapshot_id: int | None  # the table's current snapshot after it (None: no rows ever)
    how: str  # current, reverted, incremental, replaced
    files_registered: int = 0
    rows_written: int = 0  # rows pyiceberg wrote itself (copies)
    # Bytes of data files the commit added that are not strata's registered files: copies, and
    # files an upsert rewrote without the replaced keys.
    bytes_written: int = 0


@functools.lru_cache(maxsize=8)
def open_catalog(setting: CatalogSetting) -> Catalog:
    """The catalog, opened once per process (a long-lived Dagster process publishes many runs)."""
    if setting.kind == "sql" and setting.uri.startswith("sqlite:///"):
        Path(setting.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        return load_catalog(CATALOG_NAME, type=setting.kind, uri=setting.uri, warehouse=setting.location)
    except Exception as error:  # any driver's error: a catalog strata cannot open
        raise StrataError(
            E_ICEBERG,
            f"cannot open the Iceberg {setting.describe()}: {error}",
            hint="check STRATA_ICEBERG_CATALOG (for PostgreSQL, install a driver such as psycopg2)",
        ) from error


class IcebergTarget:
    """One catalog's tables: namespace = strata branch, table = model.

    `local_rewrites`: an upsert's replaced keys leave a table on a local path as one overwrite of
    the files holding them, rewritten by DuckDB (rewrite.py). False gives every table what one
    elsewhere (object storage) gets: pyiceberg's delete by a filter on the keys."""

    def __init__(self, catalog: Catalog, *, local_rewrites: bool = True) -> None:
        self.catalog = catalog
        self.local_rewrites = local_rewrites

    def table(self, namespace: str, model: str) -> Table | None:
        try:
            return self.catalog.load_table((namespace, model))
        except NoSuchTableError:
            return None

    def tables(self, namespace: str) -> list[str]:
        if namespace not in {ns[0] for ns in self.catalog.list_namespaces()}:
            return []
        return sorted(identifier[-1] for identifier in self.catalog.list_tables(namespace))

    def drop(self, namespace: str, model: str) -> None:
        if self.table(namespace, model) is not None:
            self.catalog.drop_table((namespace, model))

    def current(self, namespace: str, model: str, segment_ids: str) -> Published | None:
        """The table, when its current snapshot already holds this state (no state read)."""
        table = self.table(namespace, model)
        head = table.current_snapshot() if table is not None else None
        if head is None or head.summary is None or head.summary.get(SEGMENTS) != segment_ids:
            return None
        return Published(f"{namespace}.{model}", head.snapshot_id, "current")

    def publish(self, namespace: str, state: ModelState) -> Published:
        name = f"{namespace}.{state.model}"
        try:
            with warnings.catch_warnings():
                # Keys a segment replaces that the table does not hold yet (new keys) are no news.
                warnings.filterwarnings("ignore", message="Delete operation did not match any records")
                return self._publish(namespace, state)
        except StrataError:
            raise
        except Exception as error:  # pyiceberg, pyarrow and the catalog's driver raise their own
            raise StrataError(
                E_ICEBERG,
                f"cannot publish model `{state.model}` to Iceberg table {name}: {error}",
                subject=state.model,
                hint="the warehouse's run stands; the table keeps its previous state and catches up "
                "at the next run",
            ) from error

    def _publish(self, namespace: str, state: ModelState) -> Published:
        name = f"{namespace}.{state.model}"
        schema = _arrow_schema(state)
        table = self._table_for(namespace, state, schema)
        if not state.is_layout_known:  # files go in as the table is partitioned
            state = replace(state, partition=_partition_of_table(table, schema.names))
        current = table.current_snapshot()
        if (
            current is not None
            and current.summary is not None
            and current.summary.get(SEGMENTS) == state.segment_ids
        ):
            return Published(name, current.snapshot_id, "current")
        earlier = _snapshot_with(table, state.segment_ids)
        if earlier is not None:
            table.manage_snapshots().set_current_snapshot(earlier).commit()
            return Published(name, earlier, "reverted")
        recorded = (current.summary.get(SEGMENTS) if current is not None and current.summary else None) or ""
        ids = [segment.snapshot_id for segment in state.segments]
        done = recorded.split(",") if recorded else []
        start = len(done) if current is not None and done and ids[: len(done)] == done else 0
        is_compaction = (
            current is not None
            and state.compacted_keys is not None
            and len(state.segments) == 1
            and done == list(state.compacted_after)
        )
        how = "incremental" if start or is_compaction else "replaced"
        current_snapshots = table.snapshots()
        steps = _Steps(table, state, schema, local_rewrites=self.local_rewrites)
        with table.transaction() as tx:
            if is_compaction:
                assert state.compacted_keys is not None
                steps.replace_keys(tx, state.segments[0], state.compacted_keys())
            else:
                if start == 0 and current is not None:
                    steps.delete_all(tx)
                for index in range(start, len(state.segments)):
                    steps.apply(tx, state.segments[index], is_first=index == 0)
            steps.finish(tx)
        table = table.refresh()
        head = table.current_snapshot()
        before = {snapshot.snapshot_id for snapshot in current_snapshots}
        added = sum(
            int(snapshot.summary.get("added-files-size") or 0)
            for snapshot in table.snapshots()
            if snapshot.snapshot_id not in before and snapshot.summary is not None
        )
        return Published(
            name,
            head.snapshot_id if head else None,
            how,
            steps.files_registered,
            steps.rows_written,
            max(added - steps.bytes_registered, 0),
        )

    def _table_for(self, namespace: str, state: ModelState, schema: pa.Schema) -> Table:
        """The model's table, made anew when its columns or partitioning changed. Without the
        project (a rollback, a branch, a promotion) the layout is the table's own, or that of the
        model's table on another branch: required columns and partition spec."""
        self.catalog.create_namespace_if_not_exists(namespace)
        table = self.table(namespace, state.model)
        if table is not None:
            if state.is_layout_known:
                if _layout(table.schema().as_arrow()) == _layout(schema) and _same_partitioning(table, state):
                    return table
            elif table.schema().as_arrow().names == schema.names:
                return table
        template = table if table is not None else self._sibling(namespace, state.model)
        partition = state.partition
        if not state.is_layout_known and template is not None:
            required = {field.name for field in template.schema().fields if field.required}
            schema = pa.schema(
                [pa.field(item.name, item.type, nullable=item.name not in required) for item in schema]
            )
            partition = _partition_of_table(template, schema.names)
        if table is not None:  # the model's columns or partitioning changed: a new table
            self.catalog.drop_table((namespace, state.model))
        table = self.catalog.create_table(
            (namespace, state.model), schema=schema, properties=_TABLE_PROPERTIES
        )
        if partition is not None:
            grain, column = partition
            with table.update_spec() as spec:
                spec.add_field(column, _TRANSFORMS[grain], f"{column}_{grain}")
            table = table.refresh()
        return table

    def _sibling(self, namespace: str, model: str) -> Table | None:
        """The model's table in another namespace (branch), if one has it."""
        for (other,) in (item[:1] for item in self.catalog.list_namespaces()):
            if other != namespace and (table := self.table(other, model)) is not None:
                return table
        return None

    def snapshot_of(self, namespace: str, model: str, segment_ids: str) -> int | None:
        """The table's snapshot that published exactly this state (None: never, or expired)."""
        table = self.table(namespace, model)
        return None if table is None else _snapshot_with(table, segment_ids)

    # -- maintenance ------------------------------------------------------------------------------
    def expire(self, namespace: str, model: str, kept_entries: set[int]) -> int:
        """Expire the table's snapshots but the current one and those ending a kept run's commit,
        and delete the files of its own (data, manifests) no snapshot left references. Returns
        how many snapshots it expired."""
        table = self.table(namespace, model)
        if table is None:
            return 0
        current = table.current_snapshot()
        expired = [
            snapshot.snapshot_id
            for snapshot in table.snapshots()
            if (current is None or snapshot.snapshot_id != current.snapshot_id)
            and not ends_kept_commit(snapshot.summary, kept_entries)
        ]
        if expired:
            table.maintenance.expire_snapshots().by_ids(expired).commit()
            table = table.refresh()
        delete_unreferenced(table)
        return len(expired)


class _Steps:
    """The snapshot producers of one commit: strata's summary on each, the state's on the last."""

    def __init__(self, table: Table, state: ModelState, schema: pa.Schema, *, local_rewrites: bool) -> None:
        self.table, self.state, self.schema = table, state, schema
        self.local_rewrites = local_rewrites
        self.files_registered = 0
        self.bytes_registered = 0
        self.rows_written = 0
        self.has_rows = table.current_snapshot() is not None
        self.made = False

    def _properties(self) -> dict[str, str]:
        return dict(self.state.summary)

    def delete_all(self, tx: Transaction) -> None:
        tx.delete(AlwaysTrue(), snapshot_properties=self._properties())
        self.made = True

    def apply(self, tx: Transaction, segment: StateSegment, *, is_first: bool) -> None:
        if not is_first and segment.replaced is not None and self.state.merge_keys and self.made_or_had:
            keys = segment.replaced()
            if keys.num_rows:
                self._delete_keys(tx, keys)
                self.made = True
        metadata = pq.read_metadata(segment.file) if segment.file is not None else None
        if segment.file is not None and metadata is not None and registrable(self.state.partition, metadata):
            if metadata.num_rows == 0:
                return
            try:
                tx.add_files([str(segment.file)], snapshot_properties=self._properties())
                self.files_registered += 1
                self.bytes_registered += segment.file.stat().st_size
                self.made = True
                return
            except ValueError:
                pass  # a column the table's schema types otherwise: its rows are written instead
        rows = pq.read_table(segment.file) if segment.file is not None else segment.rows()
        self._write(tx, rows)

    def replace_keys(self, tx: Transaction, segment: StateSegment, keys: pa.Table) -> None:
        """A compacted state over the table's: the keys the compaction's delta replaced are
        deleted, and the new state's rows with those keys written (the rest stays as it is)."""
        if keys.num_rows:
            self._delete_keys(tx, keys)
        rows = pq.read_table(segment.file) if segment.file is not None else segment.rows()
        self._write(tx, rows.filter(keyed_mask(rows, keys, self.state.merge_keys, self.state.grain)))

    def _delete_keys(self, tx: Transaction, keys: pa.Table) -> None:
        """Delete the rows whose keys (partitions) `keys` holds. Keys: one overwrite of the files
        holding them, rewritten without them by DuckDB, in a table on a local path. Day and month
        partitions, or a table elsewhere: pyiceberg's delete by a filter (whole partitions drop)."""
        folder = local_path(self.table.location()) if self.local_rewrites else None
        if folder is not None and self.state.grain not in _RANGE_GRAINS and self._overwrite(tx, keys, folder):
            return
        predicate = replaced_filter(keys, self.state.merge_keys, self.state.grain, tx.table_metadata.schema())
        tx.delete(predicate, snapshot_properties=self._properties())

    def _overwrite(self, tx: Transaction, keys: pa.Table, folder: Path) -> bool:
        """The files of the table (as this transaction has it) holding a key, out; their other
        rows, written anew, in: one snapshot. False when a file is not local, or a rewritten file
        cannot be registered as the table is partitioned (nothing committed then)."""
        io, metadata = self.table.io, tx.table_metadata
        data_files = _data_files(metadata, io)
        local = {name: path for name, path in ((name, local_path(name)) for name in data_files) if path}
        if len(local) != len(data_files):
            return False
        rewrite = rewrite_without(local, keys, self.state.merge_keys, self.state.grain, folder / "data")
        if not rewrite.replaced:
            return True
        checkpoint(REWRITE_STEP)
        try:
            added = [parquet_file_to_data_file(io, metadata, str(path)) for path in rewrite.written]
        except (ValueError, KeyError):  # rows of several partitions, or none known: not registrable
            for path in rewrite.written:
                path.unlink(missing_ok=True)
            return False
        if metadata.name_mapping() is None:  # DuckDB writes no field ids: columns by name
            mapping = metadata.schema().name_mapping.model_dump_json()
            tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
        with tx.update_snapshot(snapshot_properties=self._properties()).overwrite() as overwrite:
            for name in rewrite.replaced:
                overwrite.delete_data_file(data_files[name])
            for data_file in added:
                overwrite.append_data_file(data_file)
        return True

    def _write(self, tx: Transaction, rows: pa.Table) -> None:
        """Rows strata holds in no file of their own: one Parquet file per partition, written
        once and registered, in a table on a local path; else written by pyiceberg."""
        if not rows.num_rows:
            return
        shape = self.table.schema().as_arrow()
        rows = rows.select(shape.names).cast(shape)
        self.rows_written += rows.num_rows
        self.made = True
        folder = local_path(self.table.location())
        files = (
            write_by_partition(rows, self.state.partition, folder / "data")
            if folder is not None and self.state.partition is not None
            else None
        )
        if files is None:
            tx.append(rows, snapshot_properties=self._properties())
            return
        tx.add_files([str(path) for path in files], snapshot_properties=self._properties())

    @property
    def made_or_had(self) -> bool:
        return self.made or self.has_rows

    def finish(self, tx: Transaction) -> None:
        """The commit's last snapshot names the state: an empty append carries it."""
        tx.append(
            self.table.schema().as_arrow().empty_table(),
            snapshot_properties={**self._properties(), SEGMENTS: self.state.segment_ids},
        )


def _data_files(metadata: TableMetadata, io: FileIO) -> dict[str, DataFile]:
    """The data files of the current snapshot, by path (none before the first)."""
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return {}
    return {
        entry.data_file.file_path: entry.data_file
        for manifest in snapshot.manifests(io)
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)
        if entry.data_file.content == DataFileContent.DATA
    }


def _arrow_schema(state: ModelState) -> pa.Schema:
    first = state.segments[0]
    schema = pq.read_schema(first.file) if first.file is not None else first.rows().schema
    fields = [pa.field(item.name, item.type, nullable=item.name not in state.not_null) for item in schema]
    return pa.schema(fields)


def _layout(schema: pa.Schema) -> list[tuple[str, bool]]:
    return [(item.name, item.nullable) for item in schema]


def _partition_of_table(table: Table, columns: list[str]) -> tuple[str, str] | None:
    """A table's (grain, column) partitioning, when its column is among `columns`."""
    for field in table.spec().fields:
        column = table.schema().find_column_name(field.source_id)
        grains = [grain for grain, transform in _TRANSFORMS.items() if transform == field.transform]
        if column in columns and grains:
            return grains[0], column
    return None


def _same_partitioning(table: Table, state: ModelState) -> bool:
    fields = table.spec().fields
    if state.partition is None:
        return not fields
    grain, column = state.partition
    source = table.schema().find_field(column).field_id
    return len(fields) == 1 and fields[0].source_id == source and fields[0].transform == _TRANSFORMS[grain]


def _snapshot_with(table: Table, segment_ids: str) -> int | None:
    """The newest snapshot whose commit ended with exactly this state."""
    found = [
        snapshot
        for snapshot in table.snapshots()
        if snapshot.summary is not None and snapshot.summary.get(SEGMENTS) == segment_ids
    ]
    return max(found, key=lambda snapshot: snapshot.sequence_number or 0).snapshot_id if found else None
