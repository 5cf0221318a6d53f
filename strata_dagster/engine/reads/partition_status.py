"""Per-partition content identities of sources and live views: what per-partition data versions are.

A partition's identity is the content fingerprint (schema, rows, row-hash sum) of the rows whose
partition column falls in it, the same hash `run` gives a whole relation. A partition without rows
has the identity of an empty relation with that schema.

`input_partitions` gives the figures a partition-complete build compares to find the partitions to
recompute: the rows of its unpartitioned `from` (a source, or a model's live view) grouped by the
build's partition expression.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.partitions import content_by_partition, read_rows
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.backends.opening import open_live_session, open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, model_view
from strata_dagster.engine.builds.partition_range import REQUESTED_PARTITIONS
from strata_dagster.engine.builds.partitions import raw_partition_of
from strata_dagster.engine.context import load_context
from strata_dagster.engine.reads.catalog import partition_input
from strata_dagster.engine.sources.readings import checked_basis, unreadable_source
from strata_dagster.errors import E_WAREHOUSE, StrataError
from strata_dagster.language import Project, load_project
from strata_dagster.language.definition import PartitionSpec
from strata_dagster.sql.content import WHOLE_ROW, Content, RowBasis

if TYPE_CHECKING:  # pyarrow loads with the first frame, not with the module
    import pyarrow as pa


@dataclass(frozen=True)
class PartitionContent:
    key: str
    fingerprint: str
    row_count: int
    row_hash_sum: str | None = None  # the rows' hash sum behind the fingerprint, when known


def _by_key(
    contents: Mapping[str, Content], empty: Content, keys: Iterable[str] | None
) -> dict[str, PartitionContent]:
    wanted = sorted(contents) if keys is None else list(keys)
    return {
        key: PartitionContent(key, contents.get(key, empty).fingerprint, contents.get(key, empty).row_count)
        for key in wanted
    }


def _partitions(
    session: Session,
    relation: exp.Table,
    spec: PartitionSpec,
    keys: Iterable[str] | None,
    columns: tuple[tuple[str, str], ...],
    basis: RowBasis = WHOLE_ROW,
) -> dict[str, PartitionContent]:
    contents = content_by_partition(session, relation, spec.column, spec.grain, columns, basis)
    return _by_key(contents, Content.empty(columns, basis), keys)


def source_partitions(
    project_dir: Path | str, warehouse: Path | str, name: str, keys: Iterable[str] | None = None
) -> dict[str, PartitionContent]:
    """Each partition of partitioned source `name` (only `keys`, when given, with empty ones too)."""
    project = load_project(project_dir)
    source = project.sources[name]
    if source.partitioned_by is None:
        raise ValueError(f"source `{name}` is not partitioned")
    with open_session(Path(warehouse)) as session:
        session.prepare_sources(project, {})
        relation = source_table(source, project, {})
        try:
            columns = session.describe(relation)
            basis = checked_basis(source, relation, columns)
            return _partitions(session, relation, source.partitioned_by, keys, columns, basis)
        except WarehouseError as error:
            raise unreadable_source(source, relation, error) from None


def model_partitions(
    project: Project,
    warehouse: Path | str,
    name: str,
    keys: Iterable[str] | None = None,
    branch: str = DEFAULT_BRANCH,
) -> dict[str, PartitionContent]:
    """Each partition of partitioned model `name` as its live view on `branch` exposes it."""
    spec = project.models[name].properties.partitioned_by
    if spec is None:
        raise ValueError(f"model `{name}` is not partitioned")
    with open_session(Path(warehouse)) as session:
        view = model_view(name, branch)
        try:
            return _partitions(session, view, spec, keys, session.describe(view))
        except WarehouseError as error:
            raise _not_live(name, branch, error) from None


def input_partitions(
    project_dir: Path | str,
    warehouse: Path | str,
    name: str,
    keys: Iterable[str] | None = None,
    branch: str = DEFAULT_BRANCH,
) -> dict[str, PartitionContent]:
    """Each partition of the unpartitioned source or model that partitioned model `name` reads as
    `from`, as a partition-complete build of `name` groups it (engine.builds.partitions.
    partition_fingerprints): the source's rows, or the model's live rows on `branch`, by `name`'s
    partition column traced back to them, before any filter. Row count and row-hash sum are the
    figures the build compares with its last build's; the fingerprint adds the schema. Only `keys`,
    when given (empty partitions too); rows whose partition is NULL belong to no key. ValueError
    when `name` reads no such input (engine.reads.catalog.partition_input)."""
    with open_session(Path(warehouse)) as session:
        context = load_context(session, Path(project_dir), {}, branch)
        project = context.project
        compiled = context.compiled.models[name]
        found = partition_input(project, name, compiled)
        if found is None:
            raise ValueError(f"model `{name}` does not read an unpartitioned input by partition")
        source = project.sources.get(found.upstream)
        relation = model_view(found.upstream, branch) if source is None else source_table(source, project, {})
        try:
            columns = session.describe(relation)
            basis = WHOLE_ROW if source is None else checked_basis(source, relation, columns)
            groups = session.content_by_group(
                relation, raw_partition_of(project.models[name], compiled), basis
            )
        except WarehouseError as error:
            if source is None:
                raise _not_live(found.upstream, branch, error) from None
            raise unreadable_source(source, relation, error) from None
    contents = {
        key: Content(columns, count, hash_sum, basis)
        for key, (count, hash_sum) in groups.items()
        if key is not None
    }
    wanted = sorted(contents) if keys is None else list(keys)
    empty = Content.empty(columns, basis)
    return {
        key: PartitionContent(
            key,
            contents.get(key, empty).fingerprint,
            contents.get(key, empty).row_count,
            contents.get(key, empty).row_hash_sum,
        )
        for key in wanted
    }


def read_model(
    project: Project,
    warehouse: Path | str,
    name: str,
    keys: Iterable[str] | None = None,
    branch: str = DEFAULT_BRANCH,
) -> pa.Table:
    """The live rows of model `name` (those of partitions `keys` only, when given), as last published."""
    spec = project.models[name].properties.partitioned_by if name in project.models else None
    # Through the serving copy: a consumer never holds the writer's file (nor waits for it).
    with open_live_session(Path(warehouse)) as session:
        try:
            if spec is None or keys is None:
                return read_rows(session, model_view(name, branch))
            return read_rows(
                session, model_view(name, branch), column=spec.column, grain=spec.grain, keys=list(keys)
            )
        except WarehouseError as error:
            raise _not_live(name, branch, error) from None


def _not_live(name: str, branch: str, error: WarehouseError) -> StrataError:
    return StrataError(
        E_WAREHOUSE,
        f"model `{name}` has no readable live view on branch `{branch}`: {error}",
        subject=name,
        hint=f"materialize `{name}` first (or `strata run PROJECT --models {name}`)",
    )


@dataclass(frozen=True)
class PublishedState:
    """A snapshot's content identity, and the source fingerprints a history entry consumed (the
    entry that last built or kept it, when no entry is given)."""

    content_hash: str
    row_count: int
    sources: dict[str, str]
    model_fingerprint: str  # the fingerprint the snapshot was built with
    is_view: bool = False  # a view model's snapshot: `row_count` is not counted
    is_live: bool = True  # whether the model's view shows it (when asked: `live_as`)
    built_by: str | None = None  # the run id of the entry that built it (when no entry is given)


def published_state(
    warehouse: Path | str, snapshot_id: str, entry: int | None, live_as: tuple[str, str] | None = None
) -> PublishedState:
    """`live_as`: (model, branch) whose view must show exactly this state (its segments) for
    `is_live`; else `is_live` is not read."""
    with open_session(Path(warehouse)) as session:
        record = session.history.snapshot(snapshot_id)
        if record is None:
            raise StrataError(
                E_WAREHOUSE,
                f"the history has no snapshot {snapshot_id}",
                hint="the warehouse was edited behind the engine's back; run `strata history PROJECT`",
            )
        built_by = None
        if entry is None:  # nothing was built (every model reused): what the snapshot's build read
            entry = session.history.last_build_of(record.model, snapshot_id)
            first = session.history.first_build_of(record.model, snapshot_id)
            found = session.history.entry(first) if first is not None else None
            built_by = found.run_id if found is not None else None
        sources = (
            {
                item.source: item.fingerprint
                for item in session.history.entry_sources(entry)
                if not item.partition_key
            }
            if entry is not None
            else {}
        )
        is_live = True
        if live_as is not None:
            model, branch = live_as
            is_live = session.history.pointers(branch).get(model) == record.segment_ids
        return PublishedState(
            record.content_hash,
            record.row_count,
            sources,
            record.model_fingerprint,
            record.is_view,
            is_live,
            built_by,
        )


def whole_content(warehouse: Path | str, relation: exp.Table) -> PartitionContent:
    """The content identity of a whole relation (a live view), as one partition keyed ''."""
    with open_session(Path(warehouse)) as session:
        content = session.content(relation)
        return PartitionContent("", content.fingerprint, content.row_count)


@dataclass(frozen=True)
class LiveState:
    """What a model's live view on a branch shows, from the history alone (no row is read): its
    head snapshot, and the identities of the inputs the build that made (or last kept) it read:
    each source's fingerprint, each model's content hash."""

    model: str
    snapshot_id: str
    content_hash: str
    row_count: int
    model_fingerprint: str
    is_view: bool
    inputs: dict[str, str]
    input_snapshots: dict[str, str] = field(default_factory=dict)  # each input model's snapshot read
    # Built for some partitions only (a backfill's): the others may be behind the inputs read.
    is_partial: bool = False


def live_states(
    warehouse: Path | str, models: Iterable[str], branch: str = DEFAULT_BRANCH
) -> dict[str, LiveState]:
    """The live state of each of `models` that has a live view on `branch` (read-only)."""
    with open_session(Path(warehouse), read_only=True) as session:
        if not session.has_history():
            return {}
        history = session.history
        pointers = history.pointers(branch)
        # Most models' live states were built by the same few entries, and each entry names every
        # model it built: each record and entry is read once (read again for each model, the
        # shop's nine cost 190 ms, at every Dagster step's catch-up).
        history.remember_snapshots(True)
        history.prefetch_snapshots([ids[-1] for ids in pointers.values() if ids])
        entry_sources = functools.cache(history.entry_sources)
        entry_models = functools.cache(history.entry_models)
        found = {}
        for name in models:
            ids = pointers.get(name, ())
            head = history.snapshot(ids[-1]) if ids else None
            if head is None:
                continue
            entry = history.live_build_of(name, head.snapshot_id, branch)
            inputs: dict[str, str] = {}
            input_snapshots: dict[str, str] = {}
            is_partial = False
            if entry is not None:
                inputs.update(
                    (item.source, item.fingerprint) for item in entry_sources(entry) if not item.partition_key
                )
                for built in entry_models(entry):
                    is_partial = is_partial or (
                        built.model == name and bool(built.detail.get(REQUESTED_PARTITIONS))
                    )
                    read = history.snapshot(built.snapshot_id) if built.model != name else None
                    if read is not None:
                        inputs[built.model] = read.content_hash
                        input_snapshots[built.model] = read.snapshot_id
            found[name] = LiveState(
                name,
                head.snapshot_id,
                head.content_hash,
                head.row_count,
                head.model_fingerprint,
                head.is_view,
                inputs,
                input_snapshots,
                is_partial,
            )
        return found


@dataclass(frozen=True)
class EntryFacts:
    """What one history entry was: its run id, kind and branch, and the source fingerprints it read."""

    run_id: str
    kind: str
    branch: str
    sources: dict[str, str]


def entry_facts(warehouse: Path | str, entry: int) -> EntryFacts | None:
    """The facts of history entry `entry` (read-only; None when there is no such entry)."""
    with open_session(Path(warehouse), read_only=True) as session:
        if not session.has_history():
            return None
        found = session.history.entry(entry)
        if found is None:
            return None
        sources = {
            item.source: item.fingerprint
            for item in session.history.entry_sources(entry)
            if not item.partition_key
        }
        return EntryFacts(found.run_id, found.kind, found.branch, sources)
