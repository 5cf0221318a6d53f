"""The ledger's digest decides a business-versioned source that did not change (engine.sources.business):
one digest over the consumed partitions' keys and evidence, compared with the listing's, instead
of one comparison per partition. Any difference sends the run to the per-partition comparison,
which names the partition and the evidence."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, overload

from strata_dagster.backends.base import Session
from strata_dagster.backends.duckdb import partition_evidence
from strata_dagster.backends.duckdb.listing import FolderListing
from strata_dagster.language.definition import Source
from strata_dagster.state import ledger
from strata_dagster.state.ledger import PartitionEvidence, order_of


class ConsumedLedger(NamedTuple):
    """The ledger after a run, as a reading needs it: its partitions' keys and row counts in order,
    the digest of their evidence, and the partitions themselves, built when first asked for."""

    keys: Sequence[str]
    rows: Sequence[int]
    evidence: str
    partitions: Callable[[], tuple[PartitionEvidence, ...]]


def unchanged_listing(session: Session, source: Source, found: FolderListing) -> ConsumedLedger | None:
    """When a file source's folders are exactly the partitions of the ledger's digest (the same
    keys and evidence, in order, and nothing else), the ledger as the digest records it, told from
    the listing's lists alone. None: read the listing partition by partition (anything differs, or
    cannot be told so: then the comparison names the partition and the evidence)."""
    spec = source.partitioned_by
    assert spec is not None
    if not found.folders:
        return None
    recorded = ledger.read_ledger_digest(session.meta, source.name)
    if recorded is None or len(recorded.row_counts) != len(found.folders):
        return None
    evidence = found.summary  # the listing's digest in key order, when listed with its column
    found = partition_evidence.in_key_order(found, spec.column)
    if evidence is None:
        evidence = partition_evidence.listing_digest(found, spec.column)
    if evidence != recorded.digest:
        return None
    column, marker, rows = spec.column, source.complete_when, recorded.row_counts
    skip = len(column) + 1
    return ConsumedLedger(
        _Keys(found.folders, skip),
        rows,
        evidence,
        lambda: partition_evidence.listed_partitions(found, column, marker, rows),
    )


class _Keys(Sequence[str]):
    """The partition keys of folders `column=value`, each cut from its folder's name when asked
    for: an unchanged reading asks for its last key and its window's, not for thousands."""

    def __init__(self, folders: Sequence[str], skip: int) -> None:
        self._folders = folders
        self._skip = skip

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [folder[self._skip :] for folder in self._folders[index]]
        return self._folders[index][self._skip :]

    def __len__(self) -> int:
        return len(self._folders)


def evidence_digest(consumed: Sequence[PartitionEvidence]) -> str:
    """One digest over consumed partitions' keys and evidence, in order: what the ledger's digest
    records (state.ledger.evidence_digest)."""
    return ledger.evidence_digest([part for item in consumed for part in (item.key, item.evidence)])


def unchanged_prefix(
    session: Session, source: Source, listed: list[PartitionEvidence]
) -> list[PartitionEvidence] | None:
    """When the listing starts with exactly the partitions of the ledger's digest (same keys and
    evidence, in order) and every other listed partition sorts after them: those partitions, with
    their recorded row counts. None: compare partition by partition (no digest, or anything
    differs: the comparison then names the partition and the evidence)."""
    recorded = ledger.read_ledger_digest(session.meta, source.name)
    if recorded is None:
        return None
    count = len(recorded.row_counts)
    if len(listed) < count:
        return None
    if 0 < count < len(listed) and not is_before(listed[count - 1], listed[count]):
        return None  # a new partition in the last consumed one's slot (a backfill, E053)
    head = listed if count == len(listed) else listed[:count]
    if evidence_digest(head) != recorded.digest:
        return None
    return [
        PartitionEvidence(item.key, rows, item.evidence, item.files, item.is_complete)
        for item, rows in zip(head, recorded.row_counts, strict=True)
    ]


def is_before(left: PartitionEvidence, right: PartitionEvidence) -> bool:
    return order_of(left.key) < order_of(right.key)
