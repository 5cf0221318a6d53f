"""Business-driven versioning: a source without change signals is versioned by the partitions it
holds, under the assumptions its declaration states (docs/architecture.md, R8).

Each run lists the source's partitions with cheap evidence (backends.duckdb.partition_evidence) and compares them
with the ledger of consumed partitions: a consumed partition whose evidence changed or that
disappeared breaks immutability; a new partition at or before the last consumed one breaks
monotonic arrival. `on_violation: error` stops the run (E052 / E053, nothing published);
`on_violation: rebuild` starts a new ledger and the models reading the source rebuild what the
change touches. New partitions are consumed in order, up to the first one not yet complete
(`complete_when` marker missing, or among the newest `settle` partitions): the models read the
source only up to that frontier, so a partition being written is never half read. A folder that is
no partition (`dt=garbage/`, E057), or a partition to consume whose file cannot be read (E056) or
lacks a column (E058), stops the run before anything is consumed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb import partition_evidence
from strata_dagster.backends.duckdb.listing import FolderListing
from strata_dagster.backends.duckdb.partitions import partition_key
from strata_dagster.backends.duckdb.sources import file_pattern, schema_relation, source_table
from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.context import ProjectContext
from strata_dagster.engine.listing_prefetch import listing_request
from strata_dagster.engine.sources.business_digest import (
    ConsumedLedger,
    evidence_digest,
    is_before,
    unchanged_listing,
    unchanged_prefix,
)
from strata_dagster.engine.sources.windowed import SLIDING_WINDOW, partitions_relation, windowed
from strata_dagster.errors import (
    E_PARTITION_BACKFILLED,
    E_PARTITION_CHANGED,
    E_PARTITION_COLUMNS,
    E_PARTITION_LAYOUT,
    E_PARTITION_UNREADABLE,
    E_PARTITION_VALUE,
    E_SOURCE,
    StrataError,
)
from strata_dagster.fingerprint import digest
from strata_dagster.language.definition import Model, Project, Source
from strata_dagster.sql.render import render
from strata_dagster.sql.segments import typed_literal
from strata_dagster.state import ledger
from strata_dagster.state.ledger import LedgerEntry, PartitionEvidence, order_of

# A detail key on a run's entry and a model's outcome: the business-versioned sources read.
SOURCE_VERSIONS = "source_versions"


@dataclass(frozen=True)
class Violation:
    code: str
    partition: str
    what: str


@dataclass(frozen=True)
class BusinessReading:
    """A business-versioned source as one run reads it."""

    source: str
    relation: exp.Query  # the source up to its frontier: what every model of the run reads
    fingerprint: str
    row_count: int
    basis: tuple[str, ...]
    # The ledger after this run: how many partitions, the last one, and (built when first read:
    # an unchanged source of thousands of partitions is decided without them) the partitions.
    partition_count: int
    last_partition: str | None
    consumed_of: Callable[[], tuple[PartitionEvidence, ...]] = field(compare=False, repr=False)
    new: tuple[PartitionEvidence, ...] = ()  # consumed by this run
    deferred: tuple[str, ...] = ()  # listed, not consumed yet (incomplete, or after an incomplete one)
    reset_reason: str | None = None  # this run starts a new ledger, and why
    violations: tuple[Violation, ...] = ()
    expired: tuple[str, ...] = ()  # consumed partitions that left by `partition_expiry(N)`
    columns: tuple[tuple[str, str], ...] = field(default=())
    # `sliding_window(N)`: the partitions the models read, and how to read some of them alone.
    window: tuple[str, ...] = ()
    raw: exp.Expr | None = field(default=None, compare=False)
    key: exp.Expr | None = field(default=None, compare=False)
    key_type: str = "DATE"
    # The ledger holds exactly what it held (told by its digest): nothing to record for it.
    is_ledger_unchanged: bool = False
    # ... and told so by the file listing's digest alone, before any partition was built.
    is_decided_by_listing: bool = False
    evidence: str = ""  # the digest of the consumed partitions' keys and evidence (the ledger's)

    @functools.cached_property
    def consumed(self) -> tuple[PartitionEvidence, ...]:
        return self.consumed_of()

    @property
    def is_sliding(self) -> bool:
        return self.raw is not None

    def partitions_relation(self, keys: Sequence[str]) -> exp.Query:
        assert self.raw is not None and self.key is not None
        return partitions_relation(self.raw, self.key, self.key_type, keys)

    def ledger_digest(self) -> ledger.LedgerDigest | None:
        """What the ledger's digest records after this run (None: the one it has is current)."""
        if self.is_ledger_unchanged:
            return None
        return ledger.LedgerDigest(self.evidence, tuple(item.rows for item in self.consumed))

    def version(self) -> dict[str, object]:
        """What history and Dagster show as the source's version."""
        return {
            "last_partition": self.last_partition,
            "partitions": self.partition_count,
            "new_partitions": [item.key for item in self.new],
            "deferred_partitions": list(self.deferred),
            **({"ledger_reset": self.reset_reason} if self.reset_reason else {}),
            **({"expired_partitions": list(self.expired)} if self.expired else {}),
            **(
                {"window": [self.window[0], self.window[-1]] if self.window else []}
                if self.is_sliding
                else {}
            ),
        }


def key_expression(source: Source, types: dict[str, str]) -> exp.Expr:
    """The partition of a row of the source. A hive folder is one partition whatever its value's
    type (`hour=2026-11-29 13:00:00/` is the hour; a TIMESTAMP key is kept whole); a table's DATE
    or TIMESTAMP column is cut by day (a TIMESTAMP column holds event times, not a few keys)."""
    spec = source.partitioned_by
    assert spec is not None
    type_name = types.get(spec.column, "").upper()
    is_time = type_name.startswith(("DATE", "TIMESTAMP"))
    if spec.grain == "key" and (
        not is_time or (source.path is not None and type_name.startswith("TIMESTAMP"))
    ):
        return exp.column(spec.column)
    return partition_key(spec.column, spec.grain)


def ledger_window(
    session: Session, project: Project, name: str, overrides: Mapping[str, str]
) -> exp.Query | None:
    """A sliding-window source as the last run read it (its last N consumed partitions, from the
    ledger): what `strata verify` rebuilds its models from. None for any other source."""
    source = project.sources[name]
    size = source.versioning.window
    if source.versioning.kind != SLIDING_WINDOW or size is None or name in overrides:
        return None
    spec = source.partitioned_by
    assert spec is not None
    recorded = ledger.read_ledger(session.meta, name) or {}
    keys = sorted(recorded, key=ledger.order_of)[-size:] if size else []
    types = dict(session.describe(schema_relation(source, project, {})))
    key = key_expression(source, types)
    key_type = "DATE" if not isinstance(key, exp.Column) else types.get(spec.column, "VARCHAR")
    return partitions_relation(source_table(source, project, {}), key, key_type, keys)


def list_partitions(
    session: Session, source: Source, context: ProjectContext, found: FolderListing | None = None
) -> list[PartitionEvidence]:
    """The source's partitions now, with their evidence and completeness (`found`: a file
    source's folders, listed already)."""
    spec = source.partitioned_by
    assert spec is not None
    if source.path is not None:
        found_partitions, stray = partition_evidence.list_file_partitions(
            file_pattern(source, context.project),
            spec.column,
            source.complete_when,
            partition_evidence.listing_cache_dir(session.database_path()),
            found,
        )
        if stray:
            raise StrataError(
                E_PARTITION_LAYOUT,
                f"source `{source.name}` is partitioned by `{spec.column}` but `{stray[0]}` sits in no "
                f"`{spec.column}=value/` folder",
                source.location,
                hint=f"write the files under `{spec.column}=<value>/` folders, or fix `path:` so it matches only those",
            )
        misnamed = next((item for item in found_partitions if not _is_of_kind(item.key, source)), None)
        if misnamed is not None:
            raise _misnamed_error(source, misnamed)
    else:
        relation = source_table(source, context.project, context.overrides)
        types = dict(session.describe(relation))
        found_partitions = session.partition_evidence(relation, key_expression(source, types), spec.column)
    if source.settle:
        settled = len(found_partitions) - source.settle
        found_partitions = [
            item
            if index < settled
            else PartitionEvidence(item.key, item.rows, item.evidence, item.files, False)
            for index, item in enumerate(found_partitions)
        ]
    return found_partitions


def _is_of_kind(key: str, source: Source) -> bool:
    """Whether a folder's value is of the partition column's kind: an integer for an integer column
    (`start:` an integer), else a date or timestamp (E055 keeps `start:` of the column's kind)."""
    kind = ledger.order_of(key)[0]
    return kind == (_INTEGER if isinstance(source.start, int) else _TIME)


_INTEGER, _TIME = 0, 1  # the kinds of `ledger.order_of`


def _misnamed_error(source: Source, item: PartitionEvidence) -> StrataError:
    """E057: a folder `column=value/` whose value no partition of the column can have. It is
    refused, not skipped: the models read the source through one glob of every folder, whose
    partition column DuckDB then types as text, so no statement over the source reads around it;
    and a folder skipped in silence would be a mistyped day's data never read."""
    spec = source.partitioned_by
    assert spec is not None
    folder = os.path.dirname(item.files[0]) if item.files else f"{spec.column}={item.key}"
    is_integer = isinstance(source.start, int)
    wanted = "an integer" if is_integer else "a date or timestamp"
    return StrataError(
        E_PARTITION_VALUE,
        f"source `{source.name}` has a folder `{folder}/` whose value `{item.key}` is not {wanted}: "
        f"it is no partition of `{spec.column}`; nothing was consumed or published",
        subject=f"{source.name}/{spec.column}={item.key}",
        hint=f"rename the folder to the partition its files hold "
        f"(`{spec.column}={'<integer>' if is_integer else 'YYYY-MM-DD'}/`), or move it out of the source's "
        "folder; the next run reads it then",
    )


def _counted(
    session: Session, context: ProjectContext, source: Source, items: list[PartitionEvidence]
) -> list[PartitionEvidence]:
    """File partitions about to be consumed, with their footers' row counts. E056 for a file whose
    footer cannot be read, E058 for one that lacks a column of the source (from the footers too:
    the models would fail on it, or a statement over it with the others, naming no partition)."""
    if not any(item.rows == ledger.UNCOUNTED for item in items):
        return items
    try:
        counted = partition_evidence.with_footer_rows(session.meta, items)
    except partition_evidence.UnreadableFile as unreadable:
        raise _unreadable_error(source, items, unreadable) from None
    assert source.partitioned_by is not None
    hive = source.partitioned_by.column.lower()
    columns = [name for name, _ in _columns(session, context, source) if name.lower() != hive]
    lacking = partition_evidence.lacking_columns(
        session.meta, [file for item in items for file in item.files], columns
    )
    if lacking is not None:
        path, missing = lacking
        item = _holding(items, path)
        raise StrataError(
            E_PARTITION_COLUMNS,
            f"source `{source.name}`: partition `{item.key}` holds `{path}`, which lacks the column(s) "
            f"{', '.join(f'`{name}`' for name in missing)} the source has; nothing was consumed or published",
            subject=f"{source.name}/{item.key}",
            hint="rewrite the file with every column of the source (those of its other partitions' files), or "
            "remove the partition's folder; the next run reads it again",
        )
    return counted


def _holding(items: Sequence[PartitionEvidence], path: str) -> PartitionEvidence:
    return next(item for item in items if path in item.files)


def _unreadable_error(
    source: Source, items: Sequence[PartitionEvidence], unreadable: partition_evidence.UnreadableFile
) -> StrataError:
    """E056: a partition about to be consumed holds a file that cannot be read. Refused, not waited
    for: a folder that counts as complete (its marker is there, or none is declared) and stays
    unreadable would hold back every later partition with nothing said; nothing is consumed, and
    the next run reads the folder again, so a writer still writing is simply picked up then."""
    complete = (
        f"its `{source.complete_when}` marker says the folder is complete"
        if source.complete_when
        else "the source declares no `complete_when` marker, so the folder counts as complete"
    )
    waiting = (
        ""
        if source.complete_when
        else ", or declare `complete_when: '_SUCCESS'` so that a folder is read once its writer marks it"
    )
    item = _holding(items, unreadable.path)
    return StrataError(
        E_PARTITION_UNREADABLE,
        f"source `{source.name}`: partition `{item.key}` holds `{unreadable.path}`, which cannot be read "
        f"({unreadable.reason}); "
        f"{complete}: nothing was consumed or published",
        subject=f"{source.name}/{item.key}",
        hint=f"rewrite the file whole or remove the partition's folder{waiting}; the next run reads it again",
    )


def retained_of(source: Source) -> int | None:
    """How many newest partitions the source keeps (`partition_expiry(N)`; a sliding window's
    partitions older than the window may go like expired ones); None: every partition stays."""
    return (
        source.versioning.window if source.versioning.kind in ("partition_expiry", SLIDING_WINDOW) else None
    )


def expired_of(
    listed: list[PartitionEvidence], consumed: dict[str, LedgerEntry], retained: int | None
) -> set[str]:
    """Consumed partitions that left the source by `partition_expiry(N)`: gone, and older than the
    newest N partitions (listed or consumed). None expire under other kinds."""
    if retained is None:
        return set()
    keys = sorted(set(consumed) | {item.key for item in listed}, key=order_of)
    newest = set(keys[-retained:]) if retained else set()
    now = {item.key for item in listed}
    return {key for key in consumed if key not in now and key not in newest}


def violations_of(
    listed: list[PartitionEvidence],
    consumed: dict[str, LedgerEntry],
    expired: set[str] = frozenset(),  # type: ignore[assignment]  # read only: a shared empty default
) -> list[Violation]:
    """What the listing says about the declared assumptions, against the ledger (an expired
    partition is not a violation)."""
    found: list[Violation] = []
    now = {item.key: item for item in listed}
    for key, entry in consumed.items():
        item = now.get(key)
        if item is not None and item.evidence == entry.evidence:
            continue
        if key in expired:
            continue
        if item is None:
            found.append(Violation(E_PARTITION_CHANGED, key, f"consumed partition `{key}` is gone"))
        elif item.evidence != entry.evidence:
            found.append(
                Violation(
                    E_PARTITION_CHANGED,
                    key,
                    f"consumed partition `{key}` changed: recorded [{entry.evidence}], now [{item.evidence}]",
                )
            )
    found.sort(key=lambda violation: order_of(violation.partition))
    if consumed:
        last = max(consumed, key=order_of)
        for item in listed:
            if item.key not in consumed and order_of(item.key) <= order_of(last):
                found.append(
                    Violation(
                        E_PARTITION_BACKFILLED,
                        item.key,
                        f"new partition `{item.key}` arrived at or before the last consumed one (`{last}`)",
                    )
                )
    return found


def _violation_error(source: Source, violation: Violation) -> StrataError:
    gate = "immutable_partitions" if violation.code == E_PARTITION_CHANGED else "monotonic_partitions"
    return StrataError(
        violation.code,
        f"source `{source.name}` breaks `{gate}`: {violation.what}; nothing was published",
        subject=f"{source.name}/{violation.partition}",
        hint="fix the upstream writer, or run with `--full-refresh` to rebuild from the source as it is now "
        "(or declare `on_violation: rebuild` to do so automatically)",
    )


def _frontier(
    listed: list[PartitionEvidence], consumed: set[str]
) -> tuple[list[PartitionEvidence], list[str]]:
    """Partitions to consume now, in order, stopping at the first incomplete one; and the deferred."""
    taken: list[PartitionEvidence] = []
    deferred: list[str] = []
    for item in listed:
        if item.key in consumed:
            continue
        if deferred or not item.is_complete:
            deferred.append(item.key)
        else:
            taken.append(item)
    return taken, deferred


def read_business_source(
    session: Session, context: ProjectContext, name: str, *, is_full_refresh: bool, is_hashed: bool = True
) -> BusinessReading:
    """List, check and choose what this run consumes of a business-versioned source. Raises E052 /
    E053 for a broken assumption under `on_violation: error`."""
    source = context.project.sources[name]
    spec = source.partitioned_by
    assert spec is not None
    found = None
    if source.path is not None:
        request = listing_request(source, context.project, session.database_path())

        def unchanged_reading(listing: FolderListing | None) -> BusinessReading | None:
            unchanged = (
                None if is_full_refresh or listing is None else unchanged_listing(session, source, listing)
            )
            if unchanged is None:
                return None
            return _reading(
                session, context, source, unchanged, is_ledger_unchanged=True, is_decided_by_listing=True
            )

        # A listing made before the warehouse's lock was taken only ever says "unchanged"
        # (engine.listing_prefetch); anything else is decided from one made now.
        reading = unchanged_reading(context.listings.take(request))
        if reading is None:
            found = partition_evidence.file_listing(*request)
            reading = unchanged_reading(found)
        if reading is not None:
            return reading
    listed = list_partitions(session, source, context, found)
    unchanged_head = None if is_full_refresh else unchanged_prefix(session, source, listed)
    recorded: dict[str, LedgerEntry] | None = None
    expired: set[str] = set()
    violations: list[Violation] = []
    if unchanged_head is None:
        recorded = ledger.read_ledger(session.meta, name)
        expired = expired_of(listed, recorded or {}, retained_of(source))
        violations = violations_of(listed, recorded or {}, expired)
    reset_reason: str | None = None
    if unchanged_head is not None:
        pass  # the ledger's digest: nothing consumed changed or went, nothing new sorts before it
    elif recorded is None:
        reset_reason = "first read of the source"
    elif is_full_refresh:
        reset_reason = "full refresh requested"
    elif violations:
        if source.on_violation == "error":
            raise _violation_error(source, violations[0])
        reset_reason = "; ".join(violation.what for violation in violations)
    if unchanged_head is not None:
        kept = unchanged_head
        new, deferred = _frontier(listed[len(kept) :], set())
        new = _counted(session, context, source, new)
        consumed = [*kept, *new]  # every partition after the kept ones sorts after them (checked)
    elif reset_reason is not None:
        new, deferred = _frontier(listed, set())
        new = _counted(session, context, source, new)
        consumed = new
    else:
        assert recorded is not None
        new, deferred = _frontier(listed, set(recorded))
        new = _counted(session, context, source, new)
        kept = [
            PartitionEvidence(item.key, recorded[item.key].rows, item.evidence, item.files, item.is_complete)
            for item in listed
            if item.key in recorded
        ]
        # Listed in order, and new partitions come after every kept one (or are a violation).
        consumed = (
            [*kept, *new] if not new or not kept or is_before(kept[-1], new[0]) else _sorted([*kept, *new])
        )
    if source.path is not None and not any(item.files for item in listed):
        # Nothing to read: a statement over no file would fail and abort the run's transaction.
        raise StrataError(
            E_SOURCE,
            f"source `{name}` has no file matching `{source.path}`"
            + (" (its consumed partitions are gone)" if recorded or unchanged_head else ""),
            source.location,
            hint="write the source's files first (for the example: `strata sample-data PROJECT`)",
        )
    to_hash = consumed if reset_reason else new
    hashed = to_hash
    if is_hashed and to_hash:
        hashed = _with_row_hashes(session, source, context, source_key(session, context, source), to_hash)
    new = hashed if reset_reason is None else [item for item in hashed if item.key in {n.key for n in new}]
    if reset_reason is not None:
        consumed = hashed
    taken = tuple(consumed)
    return _reading(
        session,
        context,
        source,
        ConsumedLedger(
            [item.key for item in taken],
            [item.rows for item in taken],
            evidence_digest(taken),
            lambda: taken,
        ),
        new=tuple(new),
        deferred=tuple(deferred),
        reset_reason=reset_reason,
        violations=tuple(violations) if reset_reason is not None and recorded is not None else (),
        expired=tuple(sorted(expired, key=order_of)) if reset_reason is None else (),
        is_ledger_unchanged=unchanged_head is not None and not new,
    )


def _reading(
    session: Session,
    context: ProjectContext,
    source: Source,
    consumed: ConsumedLedger,
    **outcome: Any,
) -> BusinessReading:
    """The reading of a source whose ledger after this run is `consumed`: the relation every model
    reads (the source up to the last consumed partition, or its window), its version and size."""
    spec = source.partitioned_by
    assert spec is not None
    columns = _columns(session, context, source)
    types = dict(columns)
    key = key_expression(source, types)
    key_type = "DATE" if not isinstance(key, exp.Column) else types.get(spec.column, "VARCHAR")
    relation = source_table(source, context.project, {})
    reading = exp.select("*").from_(relation)
    keys = consumed.keys
    if keys:
        reading = reading.where(exp.LTE(this=key, expression=typed_literal(keys[-1], key_type)))
    else:
        reading = reading.where(exp.false())
    window: tuple[str, ...] = ()
    row_count = sum(consumed.rows)
    is_sliding = source.versioning.kind == SLIDING_WINDOW and source.versioning.window is not None
    if is_sliding and source.versioning.window is not None:
        size = source.versioning.window
        reading = windowed(reading, key, key_type, keys, size)
        window = tuple(keys[-size:]) if size else ()
        row_count = sum(consumed.rows[-size:]) if size else 0
    fingerprint = digest("business", source.versioning.kind, columns, consumed.evidence)
    return BusinessReading(
        source.name,
        reading,
        fingerprint,
        row_count,
        (spec.column,),
        len(keys),
        keys[-1] if keys else None,
        consumed.partitions,
        columns=columns,
        window=window,
        raw=relation if is_sliding else None,
        key=key if is_sliding else None,
        key_type=key_type,
        evidence=consumed.evidence,
        **outcome,
    )


def _sorted(items: list[PartitionEvidence]) -> list[PartitionEvidence]:
    return sorted(items, key=lambda item: order_of(item.key))


def source_key(session: Session, context: ProjectContext, source: Source) -> exp.Expr:
    """The partition of a row of the source, over the columns the run reads it with."""
    return key_expression(source, dict(_columns(session, context, source)))


def _columns(session: Session, context: ProjectContext, source: Source) -> tuple[tuple[str, str], ...]:
    """The source's columns: as the run's compilation read them (one file of the folder), else
    described now; none when it cannot be read."""
    known = context.source_schemas.get(source.name)
    if known is not None and source.name not in context.overrides:
        return tuple(known)
    try:
        return session.describe(schema_relation(source, context.project, {}))
    except WarehouseError:
        return ()


def observed_version(session: Session, context: ProjectContext, name: str) -> tuple[str, int]:
    """The fingerprint and row count the next run would record for the source, read without
    writing or hashing rows; a broken assumption is not raised here (the run reports it) but gives
    a fingerprint of the listing, so an observer sees a change."""
    try:
        reading = read_business_source(session, context, name, is_full_refresh=False, is_hashed=False)
    except StrataError as error:
        if error.code not in (E_PARTITION_CHANGED, E_PARTITION_BACKFILLED):
            raise
        listed = list_partitions(session, context.project.sources[name], context)
        evidence = tuple((item.key, item.evidence) for item in listed)
        return digest("business-broken", evidence), sum(max(item.rows, 0) for item in listed)
    return reading.fingerprint, reading.row_count


def _with_row_hashes(
    session: Session,
    source: Source,
    context: ProjectContext,
    key: exp.Expr,
    items: list[PartitionEvidence],
) -> list[PartitionEvidence]:
    """`items` with the hash of their rows, read from their own files (or partitions) only: what
    `strata verify --sources` later compares the whole source with. E056 for a file some row of
    which cannot be read."""
    try:
        groups = partition_figures(session, source, context, key, items)
    except partition_evidence.UnreadableFile as unreadable:
        raise _unreadable_error(source, items, unreadable) from None
    return [item._replace(row_hash_sum=groups.get(order_of(item.key), EMPTY_PARTITION)[1]) for item in items]


# The figures of a partition that holds no row (a folder of empty files): none, hashing to "0".
EMPTY_PARTITION = (0, "0")


def partition_figures(
    session: Session,
    source: Source,
    context: ProjectContext,
    key: exp.Expr,
    items: Sequence[PartitionEvidence],
) -> dict[tuple[int, object], tuple[int, str]]:
    """The row count and row-hash sum of each of `items` that holds a row, keyed by `order_of` its
    key, read from their own files (or partitions) only. Raises partition_evidence.UnreadableFile for a file
    some row of which cannot be read (found by reading each file alone, once all together failed)."""
    if not items:
        return {}
    relation: exp.Expr
    files = [file for item in items for file in item.files]
    if source.path is not None:
        listing = exp.Array(expressions=[exp.Literal.string(file) for file in files])
        hive = exp.EQ(this=exp.column("hive_partitioning"), expression=exp.true())
        relation = exp.Table(this=exp.func("read_parquet", listing, hive))
    else:
        keys = [exp.Literal.string(item.key) for item in items]
        text = exp.cast(key.copy(), "VARCHAR")
        relation = (
            exp.select("*")
            .from_(source_table(source, context.project, context.overrides))
            .where(exp.In(this=text, expressions=keys))
        )
    try:
        return partition_evidence.by_partition_value(session.content_by_group(relation, key))
    except WarehouseError:
        unreadable = (
            partition_evidence.first_unreadable_file(session.meta, files) if source.path is not None else None
        )
        if unreadable is None:
            raise
        raise unreadable from None


def partition_groups(reading: BusinessReading, grain: str) -> dict[str | None, tuple[int, str]]:
    """The consumed partitions' evidence as per-partition figures of a model partitioned like the
    source (its day, or its month): what its partition-complete builds compare, no row read."""
    groups: dict[str | None, list[PartitionEvidence]] = {}
    for item in reading.consumed:
        day = item.key[:10]
        key = f"{day[:7]}-01" if grain == "month" else day
        groups.setdefault(key, []).append(item)
    return {
        key: (sum(item.rows for item in items), digest(*[(item.key, item.evidence) for item in items]))
        for key, items in groups.items()
    }


def describe_relation(reading: BusinessReading) -> str:
    return render(reading.relation)


def is_cut_like_source(model: Model, compiled: CompiledModel, source: Source) -> bool:
    """Whether the model's partition column is the source's partition column carried unchanged,
    at the source's grain or a coarser one: then each model partition is a union of source ones."""
    spec = model.properties.partitioned_by
    source_spec = source.partitioned_by
    if spec is None or source_spec is None or compiled.base_relation != source.name:
        return False
    base = compiled.traced_column(spec.column)
    if base is None:
        return False
    raw = compiled.base_expression(base)
    if isinstance(raw, exp.Cast):
        raw = raw.this
    if not isinstance(raw, exp.Column) or raw.name != source_spec.column:
        return False
    return source_spec.grain in ("day", "key") or spec.grain == "month"


def files_relation(reading: BusinessReading, keep: Callable[[PartitionEvidence], bool]) -> exp.Query | None:
    """The source as `reading.relation` reads it, restricted to the files of the consumed partitions
    `keep` selects: a delta that needs only those rows names them instead of DuckDB globbing every
    folder for each statement. None for a table source, or when the kept partitions hold no row
    (a listing of no file cannot be read, and an empty delta reads as the full relation would)."""
    items = [item for item in reading.consumed if keep(item)]
    if not items or any(not item.files for item in items) or sum(item.rows for item in items) <= 0:
        return None
    relation = reading.relation.copy()
    reader = relation.find(exp.Table)
    if reader is None or not isinstance(reader.this, exp.Func) or not reader.this.expressions:
        return None
    files = exp.Array(expressions=[exp.Literal.string(file) for item in items for file in item.files])
    reader.this.expressions[0].replace(files)
    return relation


def is_after(key: str, bound: str) -> bool | None:
    """Whether partition `key` sorts after `bound` (a watermark's text); None when the two are not
    of one kind (an integer and a date) and cannot be compared."""
    left, right = order_of(key), order_of(bound)
    if left[0] != right[0]:
        return None
    return left > right
