"""`strata verify --sources`: the deep check of business-versioned sources. Every consumed
partition's rows are hashed again and compared with what the ledger recorded when it was consumed,
catching what cheap evidence cannot (a file rewritten in place with the same size and row count)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from strata_dagster.engine import business
from strata_dagster.engine.context import load_context
from strata_dagster.errors import E_PARTITION_VERIFY, StrataError
from strata_dagster.warehouse import ledger
from strata_dagster.warehouse.session import WarehouseError, open_session
from strata_dagster.warehouse.sources import source_table


@dataclass(frozen=True)
class PartitionCheck:
    partition: str
    recorded: tuple[int, str | None]  # rows, row-hash sum when consumed
    now: tuple[int, str] | None  # None: the partition is gone

    @property
    def is_equal(self) -> bool:
        return self.now is not None and self.now[0] == self.recorded[0] and self.now[1] == self.recorded[1]


@dataclass(frozen=True)
class SourceCheck:
    source: str
    partitions: tuple[PartitionCheck, ...]

    @property
    def mismatched(self) -> tuple[PartitionCheck, ...]:
        return tuple(check for check in self.partitions if not check.is_equal)


def verify_sources(project_dir: Path, warehouse: Path, names: list[str] | None = None) -> list[SourceCheck]:
    """Re-hash the consumed partitions of every business-versioned source (or of `names`)."""
    with open_session(warehouse) as session:
        context = load_context(session, project_dir, {})
        checks = []
        for name, source in sorted(context.project.sources.items()):
            if not source.is_business_versioned or (names and name not in names):
                continue
            recorded = ledger.read_ledger(session.meta, name) or {}
            relation = source_table(source, context.project, {})
            try:
                types = dict(session.describe(relation))
                now = ledger.by_partition_value(
                    session.content_by_group(relation, business.key_expression(source, types))
                )
            except WarehouseError as error:
                raise StrataError(
                    E_PARTITION_VERIFY,
                    f"source `{name}` cannot be read to verify its partitions: {error}",
                    source.location,
                    hint="restore the source's files or table, then verify again",
                ) from None
            partitions = tuple(
                PartitionCheck(
                    key,
                    (entry.rows, entry.row_hash_sum),
                    now.get(ledger.order_of(key)),
                )
                for key, entry in sorted(recorded.items(), key=lambda pair: ledger.order_of(pair[0]))
            )
            checks.append(SourceCheck(name, partitions))
        return checks


def mismatch_error(checks: list[SourceCheck]) -> StrataError | None:
    """E054 naming the first source and partition whose rows differ from the ledger."""
    bad = [(check.source, part) for check in checks for part in check.mismatched]
    if not bad:
        return None
    source, part = bad[0]
    state = (
        "is gone" if part.now is None else f"holds {part.now[0]} row(s) hashing otherwise than when consumed"
    )
    return StrataError(
        E_PARTITION_VERIFY,
        f"{len(bad)} consumed partition(s) differ from the ledger; first: `{source}` partition `{part.partition}` {state}",
        subject=f"{source}/{part.partition}",
        hint="the upstream broke `immutable_partitions`: fix it, then `strata run --full-refresh` the models reading it",
    )
