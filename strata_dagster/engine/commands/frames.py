"""Publish a Python model's frame as a snapshot, the way `run` publishes a SQL model's build.

The frame becomes an immutable snapshot table; its pins (`unique`, `contract`) run against that
table; then the view is repointed and the history written, all in one transaction. A frame whose
rows equal the live snapshot keeps it (early cutoff): nothing is written, nothing downstream moves.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.frames import registered_frame
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema
from strata_dagster.engine.context import check_branch, check_branch_in
from strata_dagster.engine.paths import CUTOFF, FULL, REUSED, UNPARTITIONED
from strata_dagster.errors import E_BUILD, E_CONTRACT, E_DUPLICATE_NAME, E_UNIQUE, StrataError
from strata_dagster.fingerprint import digest, short_id
from strata_dagster.language import load_project
from strata_dagster.sql.content import Content
from strata_dagster.sql.views import snapshot_table_name
from strata_dagster.state.history import PYTHON_ENTRY_KIND, EntryModel, SnapshotRecord

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa


@dataclass(frozen=True)
class FrameRequest:
    """A Python model's output: `frame` becomes model `model`'s next snapshot on `branch`."""

    warehouse: Path
    model: str
    frame: pa.Table
    code_version: str
    branch: str = DEFAULT_BRANCH
    unique: tuple[str, ...] = ()
    # (column, DuckDB type, is_not_null), as a strata `contract` declares them.
    contract: tuple[tuple[str, str, bool], ...] = ()
    # The strata project beside it: a Python model may not take the name of one of its models.
    project_dir: Path | None = None


@dataclass(frozen=True)
class FrameResult:
    run_id: str | None  # None: the live snapshot already held these rows (nothing written)
    entry: int | None
    model: str
    path: str
    snapshot_id: str
    table_name: str
    content_hash: str
    rows: int
    duration_ms: float
    is_published: bool


def publish_frame(request: FrameRequest) -> FrameResult:
    """Write, check and publish the frame. Raises StrataError (nothing published) on any failure."""
    check_branch(request.branch)
    if request.project_dir is not None:
        project = load_project(request.project_dir)
        if request.model in project.models or request.model in project.sources:
            raise StrataError(
                E_DUPLICATE_NAME,
                f"Python model `{request.model}` has the name of a strata source or model",
                subject=request.model,
                hint="give the Python asset another name (its last asset-key component)",
            )
    with open_session(request.warehouse) as session:
        check_branch_in(session, request.branch)
        return _FramePublication(session, request).execute()


class _FramePublication:
    def __init__(self, session: Session, request: FrameRequest) -> None:
        self.session = session
        self.request = request
        self.reader = session.history
        self.schema = branch_schema(request.branch)

    def execute(self) -> FrameResult:
        started_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        started = time.perf_counter()
        name = self.request.model
        entry = self.reader.next_entry()
        self.session.begin()
        try:
            pointers = self.reader.pointers(self.request.branch)
            live_ids = pointers.get(name, ())
            current = self.reader.snapshot(live_ids[-1]) if live_ids else None
            with registered_frame(self.session, self.request.frame) as relation:
                content = self.session.content(relation)
                key = digest("frame", self.request.code_version, content.fingerprint)
                new_record: SnapshotRecord | None = None
                if self._is_present(current) and current and current.content_hash == content.fingerprint:
                    chosen, path = current, CUTOFF
                else:
                    existing = self.reader.snapshot_for_build_key(key)
                    if existing is not None and self._is_present(existing):
                        chosen, path = existing, REUSED
                    else:
                        new_record = self._write(relation, key, entry, content)
                        chosen, path = new_record, FULL
            is_published = (
                current is None
                or chosen.snapshot_id != current.snapshot_id
                or self.session.view_tables(self.schema, name) != (chosen.table_name,)
            )
            duration = (time.perf_counter() - started) * 1000
            if not is_published and new_record is None:
                self.session.rollback()
                return self._result(None, None, path, chosen, duration, False)
            run_id = digest(
                PYTHON_ENTRY_KIND, self.request.branch, name, self.request.code_version, content.fingerprint
            )
            self._publish(entry, run_id, started_at, key, chosen, new_record, path, duration, is_published)
            self.session.commit()
        except BaseException:
            self.session.rollback()
            raise
        return self._result(run_id, entry, path, chosen, duration, is_published)

    def _is_present(self, record: SnapshotRecord | None) -> bool:
        """A snapshot there to reuse or keep: its view, and its file whole (engine.run's rule)."""
        return (
            record is not None
            and self.session.snapshot_exists(record.table_name)
            and not self.session.damaged_files([record.table_name])
        )

    def _write(self, relation: exp.Table, key: str, entry: int, content: Content) -> SnapshotRecord:
        name = self.request.model
        snapshot_id = short_id(key)
        if self.reader.snapshot(snapshot_id) is not None:
            snapshot_id = short_id(digest(key, entry))
        table_name = snapshot_table_name(snapshot_id, name)
        try:
            self.session.create_snapshot(table_name, exp.select("*").from_(relation))
        except WarehouseError as error:
            raise StrataError(
                E_BUILD,
                f"DuckDB cannot store the frame of Python model `{name}`: {error}",
                subject=name,
                hint="return a polars or pandas DataFrame whose columns DuckDB can store",
            ) from None
        self._check_pins(table_name)
        return SnapshotRecord(
            snapshot_id=snapshot_id,
            model=name,
            table_name=table_name,
            partition_key=UNPARTITIONED,
            model_fingerprint=self.request.code_version,
            content_hash=content.fingerprint,
            row_count=content.row_count,
            watermark=None,
            created_entry=entry,
            row_hash_sum=content.row_hash_sum,
        )

    def _check_pins(self, table_name: str) -> None:
        name = self.request.model
        if self.request.unique:
            violation = self.session.unique_violation(table_name, self.request.unique)
            if violation is not None:
                raise StrataError(
                    E_UNIQUE,
                    f"Python model `{name}` breaks its `unique` pin: {violation.message}",
                    subject=name,
                    hint="fix the frame or the pin; nothing was published",
                )
        if self.request.contract:
            violation = self.session.contract_violation(table_name, list(self.request.contract))
            if violation is not None:
                raise StrataError(
                    E_CONTRACT,
                    f"Python model `{name}` breaks its `contract`: {violation.message}",
                    subject=name,
                    hint="fix the frame or the contract; nothing was published",
                )

    def _publish(
        self,
        entry: int,
        run_id: str,
        started_at: dt.datetime,
        key: str,
        chosen: SnapshotRecord,
        new_record: SnapshotRecord | None,
        path: str,
        duration: float,
        is_published: bool,
    ) -> None:
        name = self.request.model
        writer = self.session.writer
        if is_published:
            self.session.point_view(self.schema, name, [chosen.table_name])
        writer.add_entry(
            entry=entry,
            run_id=run_id,
            kind=PYTHON_ENTRY_KIND,
            branch=self.request.branch,
            started_at=started_at,
            models=[name],
            overrides={},
            detail={"python_model": name, "code_version": self.request.code_version},
        )
        if new_record is not None:
            writer.add_snapshot(new_record)
            writer.add_build_key(key, new_record.snapshot_id, entry)
        writer.add_entry_model(
            entry,
            EntryModel(
                name, UNPARTITIONED, chosen.snapshot_id, key, path, chosen.row_count, duration, "", {}
            ),
        )
        if is_published:
            writer.add_publication(entry, self.request.branch, name, [chosen.snapshot_id])

    def _result(
        self,
        run_id: str | None,
        entry: int | None,
        path: str,
        chosen: SnapshotRecord,
        duration: float,
        is_published: bool,
    ) -> FrameResult:
        return FrameResult(
            run_id=run_id,
            entry=entry,
            model=self.request.model,
            path=path,
            snapshot_id=chosen.snapshot_id,
            table_name=chosen.table_name,
            content_hash=chosen.content_hash,
            rows=chosen.row_count,
            duration_ms=duration,
            is_published=is_published,
        )
