"""`strata verify --sources`: the deep check of what cheap evidence stands for. Every consumed
partition of a business-versioned source is hashed again and compared with what the ledger
recorded when it was consumed, catching what cheap evidence cannot (a file rewritten in place with
the same size and row count). A source read from the record of its files' stamp (a database
file, or the files of a `path:` pattern: engine.sources.readings) is scanned and compared with that
record.

A file source's consumed partitions are read as the run read them: each from the files its folder
lists now, by name, never through a glob of every folder. A folder the ledger does not hold (one
still being written, one the next run refuses) is not read, so it cannot make consumed partitions
look changed; a consumed folder of empty files holds no row, as when it was consumed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb import partition_evidence
from strata_dagster.backends.duckdb.sources import file_pattern, source_table
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.context import ProjectContext, load_context
from strata_dagster.engine.sources import business
from strata_dagster.engine.sources.readings import recheck_stamped
from strata_dagster.errors import E_PARTITION_VERIFY, StrataError
from strata_dagster.language.definition import Source
from strata_dagster.state import ledger
from strata_dagster.state.ledger import LedgerEntry, PartitionEvidence

WHOLE_TABLE = "(whole table)"


@dataclass(frozen=True)
class PartitionCheck:
    partition: str
    recorded: tuple[int, str | None]  # rows, row-hash sum when consumed
    now: tuple[int, str] | None  # None: the partition is gone, or cannot be read (`problem`)
    problem: str | None = None  # why its files cannot be read now

    @property
    def is_equal(self) -> bool:
        return self.now is not None and self.now[0] == self.recorded[0] and self.now[1] == self.recorded[1]

    def describe_now(self) -> str:
        if self.problem is not None:
            return f"cannot be read ({self.problem})"
        return "gone" if self.now is None else f"{self.now[0]:,} rows now"


@dataclass(frozen=True)
class SourceCheck:
    source: str
    partitions: tuple[PartitionCheck, ...]
    # A source whose reads take the record of its files' stamp: one check of the whole table.
    is_stamped: bool = False

    @property
    def mismatched(self) -> tuple[PartitionCheck, ...]:
        return tuple(check for check in self.partitions if not check.is_equal)


def verify_sources(project_dir: Path, warehouse: Path, names: list[str] | None = None) -> list[SourceCheck]:
    """Re-hash the consumed partitions of every business-versioned source (or of `names`)."""
    with open_session(warehouse) as session:
        context = load_context(session, project_dir, {})
        checks = []
        for name, source in sorted(context.project.sources.items()):
            if names and name not in names:
                continue
            if not source.is_business_versioned:
                figures = recheck_stamped(session, context, name)
                if figures is not None:
                    checks.append(
                        SourceCheck(name, (PartitionCheck(WHOLE_TABLE, *figures),), is_stamped=True)
                    )
                continue
            recorded = ledger.read_ledger(session.meta, name) or {}
            ordered = sorted(recorded.items(), key=lambda pair: ledger.order_of(pair[0]))
            if source.path is not None and source.partitioned_by is not None:
                partitions = _file_checks(session, context, source, dict(ordered))
            else:
                partitions = _table_checks(session, context, source, dict(ordered))
            checks.append(SourceCheck(name, partitions))
        return checks


def _table_checks(
    session: Session, context: ProjectContext, source: Source, recorded: Mapping[str, LedgerEntry]
) -> tuple[PartitionCheck, ...]:
    """A table source's consumed partitions, from one grouped read of the table."""
    relation = source_table(source, context.project, {})
    try:
        types = dict(session.describe(relation))
        now = partition_evidence.by_partition_value(
            session.content_by_group(relation, business.key_expression(source, types))
        )
    except WarehouseError as error:
        raise _unreadable(source, str(error)) from None
    return tuple(
        PartitionCheck(key, (entry.rows, entry.row_hash_sum), now.get(ledger.order_of(key)))
        for key, entry in recorded.items()
    )


def _file_checks(
    session: Session, context: ProjectContext, source: Source, recorded: Mapping[str, LedgerEntry]
) -> tuple[PartitionCheck, ...]:
    """A file source's consumed partitions, each read from the files its folder lists now."""
    spec = source.partitioned_by
    assert spec is not None
    listed, _ = partition_evidence.list_file_partitions(
        file_pattern(source, context.project),
        spec.column,
        source.complete_when,
        partition_evidence.listing_cache_dir(session.database_path()),
    )
    present = {item.key: item for item in listed if item.key in recorded}
    figures, problems = _figures(session, context, source, list(present.values()))
    checks = []
    for key, entry in recorded.items():
        now = None
        if key in present and key not in problems:
            now = figures.get(ledger.order_of(key), business.EMPTY_PARTITION)
        checks.append(PartitionCheck(key, (entry.rows, entry.row_hash_sum), now, problems.get(key)))
    return tuple(checks)


def _figures(
    session: Session, context: ProjectContext, source: Source, items: Sequence[PartitionEvidence]
) -> tuple[dict[tuple[int, object], tuple[int, str]], dict[str, str]]:
    """The figures of the partitions `items` (read together), and why each one that cannot be read
    cannot. A partition whose file cannot be read is set aside and the others read again; when
    they cannot be read together though each file reads alone (files of other columns), each is
    read alone."""
    key = business.source_key(session, context, source)
    problems: dict[str, str] = {}
    remaining = list(items)
    while True:
        try:
            return business.partition_figures(session, source, context, key, remaining), problems
        except partition_evidence.UnreadableFile as unreadable:
            bad = next(item for item in remaining if unreadable.path in item.files)
            problems[bad.key] = f"`{unreadable.path}`: {unreadable.reason}"
            remaining = [item for item in remaining if item is not bad]
        except WarehouseError:
            break
    figures: dict[tuple[int, object], tuple[int, str]] = {}
    for item in remaining:
        try:
            figures.update(business.partition_figures(session, source, context, key, [item]))
        except (partition_evidence.UnreadableFile, WarehouseError) as error:
            problems[item.key] = str(error)
    return figures, problems


def _unreadable(source: Source, reason: str) -> StrataError:
    return StrataError(
        E_PARTITION_VERIFY,
        f"source `{source.name}` cannot be read to verify its partitions: {reason}",
        source.location,
        hint="restore the source's files or table, then verify again",
    )


def mismatch_error(checks: list[SourceCheck]) -> StrataError | None:
    """E054 naming the first source and partition whose rows differ from the ledger."""
    bad = [(check.source, part) for check in checks for part in check.mismatched]
    if not bad:
        return None
    source, part = bad[0]
    check = next(check for check in checks if check.source == source)
    if check.is_stamped:
        return StrataError(
            E_PARTITION_VERIFY,
            f"source `{source}` holds {part.describe_now()} hashing otherwise than the record of its "
            f"files' stamp ({part.recorded[0]:,} rows): its files changed while their times stayed",
            subject=source,
            hint="the record is now replaced by what was read: `strata run --only-stale` rebuilds what reads it; "
            "write such files anew and rename them into place (docs/language.md)",
        )
    rebuild = "`strata run --full-refresh` the models reading it"
    hint = f"the upstream broke `immutable_partitions`: fix it, then {rebuild}"
    if part.problem is not None:
        state = part.describe_now()
        hint = f"restore the partition's files as they were consumed; if they are lost, {rebuild}"
    elif part.now is None:
        state = "is gone"
    else:
        state = f"holds {part.now[0]} row(s) hashing otherwise than when consumed"
    return StrataError(
        E_PARTITION_VERIFY,
        f"{len(bad)} consumed partition(s) differ from the ledger; first: `{source}` partition `{part.partition}` {state}",
        subject=f"{source}/{part.partition}",
        hint=hint,
    )
