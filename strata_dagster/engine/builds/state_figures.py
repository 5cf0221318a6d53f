"""Figures a partition-built state records of its own rows: per partition, and per the slices of
the models that follow its segments.

A partition build replaces whole partitions of its previous state, and what it needs of the rows
it replaces is their row count and row-hash sum per partition; a model following its segments
(engine.builds.model_slices) needs the same figures per its own slice of those rows (a day-partitioned
model over a row-wise staging model: per day of its own partition column). Without them both
scan the whole previous state for the rows of the replaced partitions (over 10M rows, 21 days of
late updates: 520k rows read, the largest single cost of such a run).

So a state of a model built by day or month partitions records those figures per (partition,
follower slice), and every build keeps them exact: a recomputed partition gets the figures of its
new rows, the others keep theirs (row-hash sums of whole partitions add up). A build reads them
from its previous state's record; a follower compares the slice totals of the two states of its
input (the one it read last and the one now). A record holding no figures, or figures that do not
add up to its row count and row-hash sum, is not trusted: the rows are read as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.sql.content import Content
from strata_dagster.state.history import SnapshotRecord

FIGURES = "slice_figures"  # detail key
# Past this many (partition, slice) groups a state records none: its followers read rows.
MAX_GROUPS = 20_000
NULL_KEY = "\x00null"
# The partition grains whose states record figures, and the follower slices recorded: days and
# months, few enough per state to keep in its record.
RECORDED_GRAINS = (
    "day",
    "month",
)  # engine.builds.partitions.NULL_PARTITION (imported there from here would cycle)

Figures = tuple[int, int]  # row count, row-hash sum


@dataclass(frozen=True)
class SliceFigures:
    own: dict[str, Figures]  # partition -> figures of its live rows
    by: dict[str, dict[str, dict[str, Figures]]]  # follower key (SQL) -> partition -> slice -> figures

    def covers(self, keys: Iterable[str]) -> bool:
        return all(key in self.by for key in keys)

    def totals(self, key: str) -> dict[str, Figures]:
        """The state's figures per slice of a follower's key."""
        found: dict[str, Figures] = {}
        for slices in self.by[key].values():
            for name, (count, hash_sum) in slices.items():
                before = found.get(name, (0, 0))
                found[name] = (before[0] + count, before[1] + hash_sum)
        return found

    def total(self) -> Figures:
        """The figures of all the rows these describe."""
        return sum(count for count, _ in self.own.values()), sum(
            hash_sum for _, hash_sum in self.own.values()
        )

    def adds_up_to(self, record: SnapshotRecord) -> bool:
        return self.total() == (record.row_count, int(record.row_hash_sum))

    def with_partitions(self, partitions: Iterable[str], new: SliceFigures) -> SliceFigures:
        """These figures with `partitions` recomputed as `new` holds them (absent: no rows left),
        for the slices both record."""
        replaced = set(partitions)
        own = {key: value for key, value in self.own.items() if key not in replaced}
        own.update({key: value for key, value in new.own.items() if key in replaced})
        by = {}
        for key, per_partition in self.by.items():
            if key not in new.by:
                continue
            kept = {name: value for name, value in per_partition.items() if name not in replaced}
            kept.update({name: value for name, value in new.by[key].items() if name in replaced})
            by[key] = kept
        return SliceFigures(own, by)

    def content(self, columns: tuple[tuple[str, str], ...]) -> Content:
        """The content figures of the rows these describe, whose columns are `columns`."""
        count, hash_sum = self.total()
        return Content(columns, count, str(hash_sum))

    def as_detail(self) -> dict[str, Any]:
        return {
            "own": {key: [count, str(hash_sum)] for key, (count, hash_sum) in self.own.items()},
            "by": {
                key: {
                    partition: {name: [count, str(hash_sum)] for name, (count, hash_sum) in slices.items()}
                    for partition, slices in per_partition.items()
                }
                for key, per_partition in self.by.items()
            },
        }


def recorded(record: SnapshotRecord | None) -> SliceFigures | None:
    """The figures a state recorded, when they add up to its rows."""
    value = None if record is None else record.detail.get(FIGURES)
    if not isinstance(value, dict):
        return None
    assert record is not None
    figures = SliceFigures(
        {key: (int(count), int(hash_sum)) for key, (count, hash_sum) in value.get("own", {}).items()},
        {
            key: {
                partition: {name: (int(count), int(hash_sum)) for name, (count, hash_sum) in slices.items()}
                for partition, slices in per_partition.items()
            }
            for key, per_partition in value.get("by", {}).items()
        },
    )
    return figures if figures.adds_up_to(record) else None


def recorded_slices(record: SnapshotRecord) -> dict[str, exp.Expr]:
    """The follower slices a state recorded figures by, as expressions (named by their SQL)."""
    value = record.detail.get(FIGURES)
    by = value.get("by") if isinstance(value, dict) else None
    return {key: sqlglot.parse_one(key) for key in by or {}}


def measure(
    session: Session, relation: exp.Table, partition: exp.Expr, followers: Mapping[str, exp.Expr]
) -> SliceFigures | None:
    """The figures of `relation`'s rows (one grouped scan), or None past MAX_GROUPS groups."""
    names = list(followers)
    keys = [partition, *(followers[name] for name in names)]
    groups = session.content_by_groups(relation, keys, limit=MAX_GROUPS + 1)
    if len(groups) > MAX_GROUPS:
        return None
    own: dict[str, Figures] = {}
    by: dict[str, dict[str, dict[str, Figures]]] = {name: {} for name in names}
    for values, (count, hash_text) in groups.items():
        named = [NULL_KEY if value is None else value for value in values]
        hash_sum = int(hash_text)
        before = own.get(named[0], (0, 0))
        own[named[0]] = (before[0] + count, before[1] + hash_sum)
        for name, value in zip(names, named[1:], strict=True):
            slices = by[name].setdefault(named[0], {})
            before = slices.get(value, (0, 0))
            slices[value] = (before[0] + count, before[1] + hash_sum)
    return SliceFigures(own, by)


def key_text(expression: exp.Expr) -> str:
    """How a follower's slice expression over the input's rows is named in the figures."""
    return expression.sql()
