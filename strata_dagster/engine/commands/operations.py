"""History operations that only move view pointers: rollback, branches (create, delete), promote and
the retirement of removed models' views (gc: engine/commands/gc.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from strata_dagster.backends.base import Session
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema
from strata_dagster.engine.context import check_branch, check_branch_in
from strata_dagster.engine.damaged_files import describe
from strata_dagster.engine.decisions.removed import removed_models
from strata_dagster.engine.iceberg_publication import IcebergPublished, RunFacts, publish_branch
from strata_dagster.errors import E_BRANCH, E_SNAPSHOT_FILE, E_SNAPSHOT_GONE, E_UNKNOWN_RUN, StrataError
from strata_dagster.fingerprint import digest
from strata_dagster.language.loader import load_project
from strata_dagster.state.history import Entry, HistoryReader, SnapshotRecord
from strata_dagster.state.states import state_query, state_tables


@dataclass(frozen=True)
class PointerChange:
    model: str
    before: tuple[str, ...] | None
    after: tuple[str, ...]


@dataclass(frozen=True)
class PointerResult:
    run_id: str | None
    entry: int | None
    changes: tuple[PointerChange, ...]
    # The branch's Iceberg tables after the move (None: publication to Iceberg is off).
    iceberg: IcebergPublished | None = None


def find_entry(reader: HistoryReader, run_id: str) -> Entry:
    entry = reader.latest_entry_of_run(run_id)
    if entry is None:
        # Newest first, each run once (runs that published the same state share an id).
        known = list(dict.fromkeys(item.run_id[:12] for item in reversed(reader.entries())))[:5]
        raise StrataError(
            E_UNKNOWN_RUN,
            f"no run `{run_id}` in the history",
            hint="`strata history` lists runs" + (f"; recent: {', '.join(known)}" if known else ""),
        )
    return entry


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _repoint(
    session: Session,
    *,
    branch: str,
    target: dict[str, tuple[str, ...]],
    kind: str,
    id_parts: tuple[object, ...],
    target_entry: int | None = None,
    detail: dict[str, object] | None = None,
    retire: tuple[str, ...] = (),
) -> PointerResult:
    """Point `branch`'s views at `target`, drop the views of the `retire` models (recorded as an
    empty publication), and record it, in one transaction."""
    reader = session.history
    current = reader.pointers(branch)
    changes = [
        PointerChange(model, current.get(model), ids)
        for model, ids in sorted(target.items())
        if current.get(model) != ids
    ] + [PointerChange(model, current[model], ()) for model in retire if model in current]
    heads: dict[str, SnapshotRecord] = {}
    for change in changes:
        if not change.after:
            continue  # retired: no snapshot to check
        head = reader.snapshot(change.after[-1])
        if head is None or not all(
            (record := reader.snapshot(snapshot_id)) is not None
            and not record.is_dropped
            and session.snapshot_exists(record.table_name)
            for snapshot_id in change.after
        ):
            raise StrataError(
                E_SNAPSHOT_GONE,
                f"a snapshot of model `{change.model}` no longer exists (dropped by gc)",
                hint="choose a more recent run, or keep more runs with `strata gc --keep N`",
            )
        damaged = session.damaged_files(state_tables(reader, head))
        if damaged:
            raise StrataError(
                E_SNAPSHOT_FILE,
                f"cannot point `{change.model}` at the state this {kind} names: its snapshot file "
                f"{describe(damaged)}",
                subject=change.model,
                hint="nothing was changed; choose another run (`strata history PROJECT`), or rebuild the "
                "model with `strata run PROJECT --models MODEL`; `strata doctor PROJECT` lists every damaged file",
            )
        heads[change.model] = head
    if not changes:
        return PointerResult(None, None, ())
    run_id = digest(kind, branch, *id_parts, sorted(target.items()))
    entry = reader.next_entry()
    with session.transaction():
        for change in changes:
            if change.after:
                head = heads[change.model]
                session.point_view_at(branch_schema(branch), change.model, state_query(reader, head))
            else:
                session.drop_view(branch_schema(branch), change.model)
            session.writer.add_publication(entry, branch, change.model, list(change.after))
        session.writer.add_entry(
            entry=entry,
            run_id=run_id,
            kind=kind,
            branch=branch,
            started_at=_now(),
            models=[change.model for change in changes],
            overrides={},
            target_entry=target_entry,
            detail=detail,
        )
    warehouse = session.database_path()
    iceberg = (
        publish_branch(session, Path(warehouse), branch, None, RunFacts(entry, run_id, kind))
        if warehouse is not None
        else None
    )
    return PointerResult(run_id, entry, tuple(changes), iceberg)


def rollback(warehouse: Path, run_id: str) -> PointerResult:
    """Point the run's branch back at exactly what it exposed right after that run: a view of a
    model it had no view of then (built later, or retired by then) is dropped."""
    with open_session(warehouse, must_exist=True) as session:
        reader = session.history
        target_entry = find_entry(reader, run_id)
        state = reader.pointers(target_entry.branch, as_of_entry=target_entry.entry)
        later = tuple(sorted(set(reader.pointers(target_entry.branch)) - set(state)))
        return _repoint(
            session,
            branch=target_entry.branch,
            target=state,
            kind="rollback",
            id_parts=(target_entry.run_id,),
            target_entry=target_entry.entry,
            detail={"rolled_back_to": target_entry.run_id},
            retire=later,
        )


def create_branch(warehouse: Path, name: str, source: str = DEFAULT_BRANCH) -> PointerResult:
    """A new branch whose views point at the same snapshots as `source` (zero-copy)."""
    check_branch(name)
    with open_session(warehouse, must_exist=True) as session:
        check_branch_in(session, name)
        reader = session.history
        if name in reader.branches():
            raise StrataError(E_BRANCH, f"branch `{name}` already exists", hint="pick another name")
        if source not in reader.branches():
            raise StrataError(
                E_BRANCH, f"branch `{source}` does not exist", hint="run `strata run` on it first"
            )
        return _repoint(
            session,
            branch=name,
            target=reader.pointers(source),
            kind="branch",
            id_parts=(source,),
            detail={"from": source},
        )


def promote(warehouse: Path, source: str, target: str = DEFAULT_BRANCH) -> PointerResult:
    """Point `target`'s views at the snapshots `source` exposes (zero-copy)."""
    check_branch(source, reserved=False)  # only read: a branch made before its name was reserved
    check_branch(target)
    with open_session(warehouse, must_exist=True) as session:
        check_branch_in(session, target)
        reader = session.history
        if source not in reader.branches():
            raise StrataError(
                E_BRANCH, f"branch `{source}` does not exist", hint="`strata branch create` makes one"
            )
        return _repoint(
            session,
            branch=target,
            target=reader.pointers(source),
            kind="promote",
            id_parts=(source,),
            detail={"from": source},
        )


def delete_branch(warehouse: Path, name: str) -> PointerResult:
    """Drop every view of branch `name`, recorded as a history entry (kind `branch_delete`): the
    branch is gone from `strata history`'s branches, gc may collect what only it exposed, and
    `strata rollback` to one of its runs brings it back while gc has kept that run's snapshots."""
    check_branch(name, reserved=False)  # a branch made before its name was reserved can go
    if name == DEFAULT_BRANCH:
        raise StrataError(
            E_BRANCH,
            f"branch `{DEFAULT_BRANCH}` cannot be deleted: it is what readers read by default",
            hint="`strata retire PROJECT` drops the views of models the project no longer defines",
        )
    with open_session(warehouse, must_exist=True) as session:
        reader = session.history
        if name not in reader.branches():
            known = ", ".join(f"`{branch}`" for branch in reader.branches()) or "none"
            raise StrataError(E_BRANCH, f"branch `{name}` does not exist", hint=f"branches: {known}")
        return _repoint(
            session,
            branch=name,
            target={},
            kind="branch_delete",
            id_parts=(name,),
            detail={"deleted": name},
            retire=tuple(sorted(reader.pointers(name))),
        )


def retire_removed(project_dir: Path, warehouse: Path, branch: str = DEFAULT_BRANCH) -> PointerResult:
    """Drop the live views on `branch` of the models the project no longer defines, recorded as a
    history entry (kind `retire`): readers stop getting rows nothing rebuilds any more, and
    `strata rollback` to an earlier run brings the views back while gc has kept their snapshots."""
    check_branch(branch)
    project = load_project(project_dir)
    with open_session(warehouse, must_exist=True) as session:
        check_branch_in(session, branch)
        reader = session.history
        removed = removed_models(reader, reader.pointers(branch), project)
        if not removed:
            return PointerResult(None, None, ())
        return _repoint(
            session,
            branch=branch,
            target={},
            kind="retire",
            id_parts=removed,
            detail={"retired": list(removed)},
            retire=removed,
        )
