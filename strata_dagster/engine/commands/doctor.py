"""`strata doctor`: check every file the warehouse refers to, and name the command that repairs each
problem. It reads, never repairs (the commands it names do): the warehouse file (every history
table read whole), each snapshot file (whole, its footer readable, as many rows as recorded), the
serving copy (its link, manifest and catalog, the entry it serves, the files it reads), and what
is left over beside them (temporary files, files nothing reads, a compaction's copy, spill files).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_dagster.backends.base import Session
from strata_dagster.backends.choice import current_backend
from strata_dagster.backends.duckdb import inspection, serving, snapshot_files
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.damaged_files import repair_command
from strata_dagster.errors import (
    E_BACKEND_UNSUPPORTED,
    E_SERVING_DAMAGED,
    E_SNAPSHOT_FILE,
    E_WAREHOUSE,
    W_SNAPSHOT_FILE_REBUILT,
    StrataError,
)
from strata_dagster.state.history import HistoryReader, detail_file_problem
from strata_dagster.state.states import state_tables

_WRITE_AGAIN = "any writing command writes it again: `strata run PROJECT --only-stale`"
_GC = "`strata gc PROJECT --keep N` removes it (or delete it when no strata command runs)"


@dataclass(frozen=True)
class Finding:
    """One problem: its code (None: a leftover, nothing is broken), where, what, and the repair."""

    code: str | None
    subject: str
    problem: str
    repair: str

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "subject": self.subject, "problem": self.problem, "repair": self.repair}


@dataclass(frozen=True)
class DoctorReport:
    warehouse: Path
    findings: tuple[Finding, ...]
    files_checked: int

    @property
    def is_healthy(self) -> bool:
        """No error: leftovers and warnings alone do not fail the check."""
        return not any(finding.code is not None and finding.code.startswith("E") for finding in self.findings)

    def as_json(self) -> dict[str, Any]:
        return {
            "warehouse": str(self.warehouse),
            "is_healthy": self.is_healthy,
            "files_checked": self.files_checked,
            "findings": [finding.as_json() for finding in self.findings],
        }


def doctor(warehouse: Path) -> DoctorReport:
    """Every problem found with the files of `warehouse` (which must exist: E020 otherwise)."""
    if not current_backend().capabilities.has_warehouse_file:
        raise StrataError(
            E_BACKEND_UNSUPPORTED,
            "`strata doctor` checks a DuckDB warehouse's files; Spark keeps its own",
            hint="run it without --backend spark, on a DuckDB warehouse",
        )
    if not warehouse.exists():
        raise StrataError(
            E_WAREHOUSE,
            f"warehouse `{warehouse}` does not exist",
            hint="check --warehouse (or STRATA_WAREHOUSE), or run `strata run PROJECT` first",
        )
    findings: list[Finding] = []
    checked = 1
    latest: int | None = None
    referenced: set[str] | None = None  # None: unknown (the warehouse could not be read)
    try:
        with open_session(warehouse, read_only=True) as session:
            problem = inspection.history_problem(session.con)  # type: ignore[attr-defined]  # a DuckDB session (others are refused above), not importable here
            if problem is not None:
                findings.append(_damaged_warehouse(warehouse, problem))
            else:
                latest = _latest_entry(session.history) if session.has_history() else None
                files, referenced = _snapshot_findings(session, warehouse)
                findings.extend(files)
                checked += len(referenced)
                details, details_checked = _detail_findings(session.history)
                findings.extend(details)
                checked += details_checked
    except StrataError as error:
        if error.code != E_WAREHOUSE:
            raise
        findings.append(_damaged_warehouse(warehouse, error.message))
    served = inspection.serving_problems(warehouse, latest)
    findings.extend(
        Finding(E_SERVING_DAMAGED, found.subject, found.problem, _WRITE_AGAIN) for found in served
    )
    findings.extend(_unserved(warehouse))
    kept = serving.snapshot_files_read_since(warehouse, 0)
    known = None if referenced is None or kept is None else referenced | kept
    for found in inspection.leftovers(warehouse, known):
        repair = (
            _GC if ".snapshots" in found.subject or ".serving" in found.subject else _leftover_repair(found)
        )
        findings.append(Finding(None, found.subject, found.problem, repair))
    return DoctorReport(warehouse, tuple(findings), checked)


def _latest_entry(history: HistoryReader) -> int | None:
    entries = history.entries()
    return entries[-1].entry if entries else None


def _damaged_warehouse(warehouse: Path, problem: str) -> Finding:
    return Finding(
        E_WAREHOUSE,
        str(warehouse),
        problem,
        "restore the file together with its `.snapshots` folder from a backup (readers of the serving "
        "copy still see the last published state)",
    )


def _snapshot_findings(session: Session, warehouse: Path) -> tuple[list[Finding], set[str]]:
    """Each snapshot file checked whole (footer and row count); the repair depends on whether a
    branch's live state reads it (a run rebuilds it) or only an older run's (gc drops it)."""
    reader = session.history
    index = session.file_index()  # type: ignore[attr-defined]  # a DuckDB session (others are refused above), not importable here
    folder = snapshot_files.folder_of(warehouse.absolute())
    live = dict(_live_uses(reader, index))
    heads = {
        record.table_name: record.row_count
        for record in reader.snapshots()
        if record.segment_ids == (record.snapshot_id,) and not record.is_view and not record.is_dropped
    }
    findings = []
    for name, path in sorted(index.paths.items()):
        if path.parent != folder:
            findings.append(
                Finding(
                    W_SNAPSHOT_FILE_REBUILT,
                    str(path),
                    f"read by snapshot `{name}` from another folder than `{folder}` (the warehouse file "
                    "was copied without its `.snapshots` folder)",
                    f"copy that folder beside the warehouse as `{folder.name}`: the next command then "
                    "reads its files",
                )
            )
        rows = inspection.parquet_rows(session.con, path)  # type: ignore[attr-defined]  # a DuckDB session (others are refused above), not importable here
        if isinstance(rows, int) and (name not in heads or heads[name] == rows):
            continue
        problem = (
            rows if isinstance(rows, str) else f"holds {rows} rows where the history recorded {heads[name]}"
        )
        uses = live.get(name)
        if uses:
            branch = uses[0][0]
            models = sorted({model for used_branch, model in uses if used_branch == branch})
            repair = f"{repair_command(models, branch)} rebuilds the live state reading it"
            if isinstance(rows, int):  # whole, but not what was written: a run would trust it
                repair = f"move the file away (it does not hold the rows recorded), then {repair}"
            subject = f"{path} (snapshot of `{uses[0][1]}`, live on branch `{branch}`)"
            findings.append(Finding(E_SNAPSHOT_FILE, subject, problem, repair))
        else:  # only older runs read it: nothing is broken until a rollback to one of them
            repair = (
                "no branch reads it: a rollback to a run that does is refused (E038); "
                "`strata gc PROJECT --keep N` drops it once no kept run uses it"
            )
            findings.append(Finding(W_SNAPSHOT_FILE_REBUILT, f"{path} (snapshot `{name}`)", problem, repair))
    return findings, {path.name for path in index.paths.values() if path.parent == folder}


def _detail_findings(reader: HistoryReader) -> tuple[list[Finding], int]:
    """Each detail file the history names, read whole, and those it does not name (state/detail_files.py).
    A live state whose file is gone has lost its figures: a run rebuilds that model in full."""
    files = reader.files
    if files is None:
        return [], 0
    named = reader.detail_file_names()
    live: dict[str, tuple[str, str]] = {}  # detail file -> (branch, model) of a live state naming it
    for branch in sorted(reader.branches(), key=lambda name: (name != DEFAULT_BRANCH, name)):
        for model, ids in sorted(reader.pointers(branch).items()):
            head = reader.snapshot(ids[-1])
            lost = detail_file_problem(head) if head is not None else None
            if lost is not None:
                live.setdefault(lost[0].name, (branch, model))
    findings = []
    for name in sorted(named):
        problem = files.whole_file_problem(name)
        if problem is None:
            continue
        path = files.folder / name
        if name in live:
            branch, model = live[name]
            subject = f"{path} (figures of `{model}`'s live state on branch `{branch}`)"
            repair = f"{repair_command([model], branch)} rebuilds it in full (a run does so by itself)"
            findings.append(Finding(E_SNAPSHOT_FILE, subject, problem, repair))
        else:
            repair = "only older runs' figures or `strata history` detail are in it: nothing to rebuild"
            findings.append(Finding(W_SNAPSHOT_FILE_REBUILT, str(path), problem, repair))
    findings.extend(
        Finding(None, str(files.folder / name), "a detail file no history record names", _GC)
        for name in files.names()
        if name not in named
    )
    return findings, len(named)


def _live_uses(
    reader: HistoryReader, index: snapshot_files.FileIndex
) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """snapshot -> the (branch, model) whose live state reads it (its companions included)."""
    uses: dict[str, list[tuple[str, str]]] = {}
    for branch in sorted(reader.branches(), key=lambda name: (name != DEFAULT_BRANCH, name)):
        for model, ids in sorted(reader.pointers(branch).items()):
            head = reader.snapshot(ids[-1])
            if head is None:
                continue
            for table in state_tables(reader, head):
                for name in index.with_companions(table):
                    uses.setdefault(name, []).append((branch, model))
    yield from uses.items()


def _unserved(warehouse: Path) -> list[Finding]:
    left_out = serving.left_out(warehouse)
    return [
        Finding(
            W_SNAPSHOT_FILE_REBUILT,
            view,
            f"not served to readers: {why}",
            f"{repair_command([view.split('.', 1)[1].removeprefix('v_')])} rebuilds it",
        )
        for view, why in sorted(left_out.items())
    ]


def _leftover_repair(found: inspection.Problem) -> str:
    if found.subject.endswith(".compact"):
        return "the next `strata gc PROJECT --keep N --compact` removes it (or delete it when no strata command runs)"
    return "delete the folder when no strata command runs"
