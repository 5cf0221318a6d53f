"""`strata replay RUN_ID`: what a run did, and (with --execute) whether it still reproduces.

A run records, per model, the exact SQL it ran against immutable upstream snapshots and the
source relations it read, with their fingerprints. Re-executing that SQL in scratch space (a
transaction that is always rolled back) and comparing row-hash contents tells whether the
recorded snapshot is what those inputs give.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.commands.operations import find_entry
from strata_dagster.engine.reads.explain import BuildExplanation, explain_entry
from strata_dagster.errors import E_UNKNOWN_RUN, StrataError
from strata_dagster.sql.render import DIALECT, parse_table_name, snapshot_table
from strata_dagster.state.history import Entry, EntryModel, EntrySource

SCRATCH_PREFIX = "scratch_replay_"


@dataclass(frozen=True)
class ReplayCheck:
    model: str
    status: str  # "reproduced" | "differs" | "inputs changed" | "snapshot gone" | "failed" | "view"
    detail: str


@dataclass(frozen=True)
class ReplayReport:
    entry: Entry
    sources: tuple[EntrySource, ...]
    models: tuple[EntryModel, ...]
    builds: tuple[BuildExplanation, ...]  # why each model took its path, in `models` order
    checks: tuple[ReplayCheck, ...] = ()

    @property
    def is_reproduced(self) -> bool:
        return all(check.status in ("reproduced", "incremental state", "view") for check in self.checks)


def replay(warehouse: Path, run_id: str, *, execute: bool = False) -> ReplayReport:
    with open_session(warehouse, read_only=not execute, must_exist=True) as session:
        if not session.has_history():
            raise StrataError(
                E_UNKNOWN_RUN, f"no run `{run_id}` in the history", hint="the warehouse has no run yet"
            )
        reader = session.history
        entry = find_entry(reader, run_id)
        sources = tuple(reader.entry_sources(entry.entry))
        models = tuple(reader.entry_models(entry.entry))
        builds = explain_entry(reader, entry.entry)
        if not execute:
            return ReplayReport(entry, sources, models, builds)
        return ReplayReport(entry, sources, models, builds, tuple(_execute(session, sources, models)))


def _execute(
    session: Session, sources: tuple[EntrySource, ...], models: tuple[EntryModel, ...]
) -> list[ReplayCheck]:
    changed = {
        source.relation: source.source
        for source in sources
        if _current_fingerprint(session, source) != source.fingerprint
    }
    checks = []
    session.begin()
    try:
        for model in models:
            checks.append(_check(session, model, changed))
    finally:
        session.rollback()  # scratch space never outlives the replay
    return checks


def _current_fingerprint(session: Session, source: EntrySource) -> str | None:
    try:
        relation = sqlglot.parse_one(source.relation, read=DIALECT, into=exp.Table)
    except sqlglot.errors.ParseError:
        relation = parse_table_name(source.relation)
    try:
        return session.content(relation, source.row_basis).fingerprint
    except WarehouseError:
        return None


def _check(session: Session, model: EntryModel, changed: dict[str, str]) -> ReplayCheck:
    record = session.history.snapshot(model.snapshot_id)
    if record is None or record.is_dropped or not session.snapshot_exists(record.table_name):
        return ReplayCheck(model.model, "snapshot gone", "the recorded snapshot was dropped by gc")
    if record.is_view:
        # Its identity comes from its inputs, not its rows, which it reads live: nothing to compare.
        return ReplayCheck(
            model.model,
            "view",
            "a view over its inputs, read live: `strata verify` compares it with a full rebuild",
        )
    if record.detail.get("strategy") and model.path not in ("full", "delta"):
        return ReplayCheck(
            model.model,
            "incremental state",
            "built from deltas over earlier runs: `strata verify` compares it with a full rebuild",
        )
    statement = sqlglot.parse_one(model.sql, read=DIALECT)
    blocked = sorted({changed[relation] for relation in _relations_read(statement) if relation in changed})
    if blocked:
        return ReplayCheck(
            model.model, "inputs changed", "sources changed since the run: " + ", ".join(blocked)
        )
    name = f"{SCRATCH_PREFIX}{model.snapshot_id}_{model.model}"
    try:
        session.create_snapshot(name, statement)  # type: ignore[arg-type]  # a model's SQL parses to a query
    except WarehouseError as error:
        return ReplayCheck(model.model, "failed", str(error))
    rebuilt = session.content(snapshot_table(name))
    if model.path == "delta":
        expected = (model.detail.get("segment_rows"), model.detail.get("segment_hash_sum"))
        if (rebuilt.row_count, rebuilt.row_hash_sum) == expected:
            return ReplayCheck(
                model.model, "reproduced", f"delta of {rebuilt.row_count} rows, identical contents"
            )
        return ReplayCheck(
            model.model, "differs", f"delta rebuilt with {rebuilt.row_count} rows vs {expected[0]} recorded"
        )
    if rebuilt.fingerprint == record.content_hash:
        return ReplayCheck(model.model, "reproduced", f"{rebuilt.row_count} rows, identical contents")
    return ReplayCheck(
        model.model,
        "differs",
        f"rebuilt {rebuilt.row_count} rows vs {record.row_count} recorded; contents differ",
    )


def _relations_read(statement: exp.Expr) -> set[str]:
    """Each table or table function the statement reads, rendered without its alias."""
    names = set()
    for table in statement.find_all(exp.Table):
        bare = table.copy()
        bare.set("alias", None)
        names.add(bare.sql(dialect=DIALECT))
    return names
