"""What an orchestrator asks of business-versioned sources between runs: which partitions arrived,
their per-partition versions, and whether an assumption broke, from the listing and the ledger
alone (no row is read; footers only for partitions not consumed yet, as a run reads them).

A partition's version is a digest of its evidence (files and sizes, or count and range), so it
changes exactly when the ledger check would see the partition change. Only complete partitions
up to the frontier have one: a folder without its `complete_when` marker, or one of the newest
`settle` partitions, is not a version anyone should build from yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strata_dagster.backends.base import Session
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.context import ProjectContext, load_context
from strata_dagster.engine.reads.partition_staleness import cut_like_stale
from strata_dagster.engine.sources import business
from strata_dagster.engine.sources.business import Violation
from strata_dagster.errors import E_PARTITION_BACKFILLED, E_PARTITION_CHANGED, StrataError
from strata_dagster.fingerprint import digest
from strata_dagster.sql.render import render
from strata_dagster.state import ledger
from strata_dagster.state.ledger import PartitionEvidence


def partition_version(item: PartitionEvidence) -> str:
    """The data version of one partition: its key and evidence."""
    return digest("business-partition", item.key, item.evidence)


@dataclass(frozen=True)
class SourceArrivals:
    """One business-versioned source as the next run would find it."""

    source: str
    fingerprint: str  # the source's version the next run records (its `__whole` data version)
    row_count: int  # rows of the consumed partitions (the ledger's and the new footers' counts)
    relation: str  # what the models read
    last_partition: str | None  # the last partition the next run would have consumed
    versions: dict[str, str]  # complete partitions up to the frontier (consumed or new) -> version
    new: tuple[str, ...]  # complete, not consumed yet: the next run consumes them
    deferred: tuple[str, ...]  # listed, not consumable yet (incomplete, or after an incomplete one)
    violations: tuple[Violation, ...] = ()
    is_blocked: bool = False  # a violation under `on_violation: error`: the next run fails with it
    # Partitioned models cut like the source -> the partitions a build recomputes now (engine-told),
    # None when the model was never built by partitions; a model left out is not answered by
    # partition (over a sliding window), or the source's version was the one known.
    stale: dict[str, tuple[str, ...] | None] = field(default_factory=dict)

    def describe(self) -> str:
        if self.is_blocked:
            first = self.violations[0]
            return f"{first.code}: {first.what}"
        parts = [f"last partition {self.last_partition or 'none'}", f"{len(self.versions)} complete"]
        if self.new:
            parts.append("new: " + ", ".join(self.new[:10]) + (" ..." if len(self.new) > 10 else ""))
        if self.deferred:
            parts.append(
                "waiting: " + ", ".join(self.deferred[:10]) + (" ..." if len(self.deferred) > 10 else "")
            )
        return "; ".join(parts)


def read_arrivals(
    session: Session, context: ProjectContext, name: str, *, known: str | None | bool = True
) -> SourceArrivals:
    """`name`'s arrivals, read without writing, with the stale partitions of the partitioned models
    cut like it when `known` is True, or a version other than the source's now, or new partitions
    wait to be consumed (False: never).
    Raises StrataError for a source that cannot be listed (E051)."""
    source = context.project.sources[name]
    try:
        reading = business.read_business_source(
            session, context, name, is_full_refresh=False, is_hashed=False
        )
    except StrataError as error:
        if error.code not in (E_PARTITION_CHANGED, E_PARTITION_BACKFILLED):
            raise
        return _blocked(session, context, name)
    versions = {item.key: partition_version(item) for item in reading.consumed}
    stale: dict[str, tuple[str, ...] | None] = {}
    # Also for a version already known while partitions wait to be consumed: the runs launched for
    # them ended without consuming them (failed), and are launched again.
    if known is True or (known is not False and (known != reading.fingerprint or reading.new)):
        stale = cut_like_stale(session, context, name, reading)
    assert source.partitioned_by is not None
    return SourceArrivals(
        name,
        reading.fingerprint,
        reading.row_count,
        business.describe_relation(reading),
        reading.last_partition,
        versions,
        tuple(item.key for item in reading.new),
        reading.deferred,
        reading.violations,
        False,
        stale,
    )


def _blocked(session: Session, context: ProjectContext, name: str) -> SourceArrivals:
    """A source whose listing breaks an assumption under `on_violation: error`: what it breaks."""
    source = context.project.sources[name]
    listed = business.list_partitions(session, source, context)
    recorded = ledger.read_ledger(session.meta, name) or {}
    expired = business.expired_of(listed, recorded, business.retained_of(source))
    violations = business.violations_of(listed, recorded, expired)
    evidence = tuple((item.key, item.evidence) for item in listed)
    return SourceArrivals(
        name,
        digest("business-broken", evidence),
        sum(max(item.rows, 0) for item in listed),
        render(source_table(source, context.project, {})),
        max(recorded, key=ledger.order_of) if recorded else None,
        {},
        (),
        (),
        tuple(violations),
        True,
    )


def peek_arrivals(
    project_dir: Path | str,
    warehouse: Path | str,
    names: list[str],
    *,
    branch: str = DEFAULT_BRANCH,
    timeout: float | None = None,
    known: Mapping[str, str | None | bool] | None = None,
) -> dict[str, SourceArrivals]:
    """The arrivals of the named business-versioned sources, in one read-only session (waiting at
    most `timeout` seconds for a writer's lock: E021 after that), with the stale partitions of
    their cut-like models. `known`: source -> the version an orchestrator recorded for it; those
    stale partitions are read only for a source whose version differs, or whose new partitions
    wait to be consumed, or given True (None: for none)."""
    with open_session(Path(warehouse), read_only=True, timeout=timeout) as session:
        context = load_context(session, Path(project_dir), {}, branch)
        return {
            name: read_arrivals(session, context, name, known=False if known is None else known.get(name))
            for name in names
        }


def partition_versions(project_dir: Path | str, warehouse: Path | str, name: str) -> SourceArrivals:
    """A business-versioned source's per-partition versions, for an observation (read-only)."""
    return peek_arrivals(project_dir, warehouse, [name])[name]
