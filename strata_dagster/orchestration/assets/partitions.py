"""Dagster time partitions for strata's `partitioned_by`: daily or monthly, over the data's days.

A strata partition key is an ISO date (the day, or the month's first day), which is exactly what
Dagster's daily and monthly partitions use, so keys pass between the two unchanged.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from strata_dagster.engine.builds.partition_bounds import PartitionBounds
from strata_dagster.language.definition import PartitionSpec

MONTHLY_GRAINS = ("month",)


def _today() -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date()


def _month_index(day: dt.date) -> int:
    return day.year * 12 + day.month - 1


def _month_start(index: int) -> dt.date:
    return dt.date(index // 12, index % 12 + 1, 1)


def time_partitions(
    spec: PartitionSpec,
    bounds: PartitionBounds | None,
    *,
    is_open_ended: bool = False,
    today: dt.date | None = None,
) -> dg.TimeWindowPartitionsDefinition:
    """Daily or monthly partitions from the first partition the data holds to the last one.

    `is_open_ended` runs them on to the last complete day or month instead (Dagster's usual
    partitions, which grow with time), still reaching the data's last partition when the data runs
    past today. Without data yet, they start today (this month).
    """
    today = today or _today()
    if spec.grain in MONTHLY_GRAINS:
        first = _month_index(bounds.first if bounds else today)
        last = _month_index(bounds.last) if bounds else first
        offset = max(0, last - (_month_index(today) - 1))  # partitions past the last complete month
        return dg.MonthlyPartitionsDefinition(
            start_date=_month_start(first).isoformat(),
            end_date=None if is_open_ended or not bounds else _month_start(last + 1).isoformat(),
            end_offset=offset,
        )
    first_day = bounds.first if bounds else today
    last_day = bounds.last if bounds else first_day
    offset = max(0, (last_day - (today - dt.timedelta(days=1))).days)
    return dg.DailyPartitionsDefinition(
        start_date=first_day.isoformat(),
        end_date=None if is_open_ended or not bounds else (last_day + dt.timedelta(days=1)).isoformat(),
        end_offset=offset,
    )


def coarser_time_mapping() -> dg.TimeWindowPartitionMapping:
    """A month over days: the days that exist. The daily partitions end with the data (2025-02-09)
    while the month 2025-02 exists as soon as one of its days does; Dagster's default mapping then
    requires 2025-02-10..28 and refuses to launch any backfill that includes the month. (The
    parameter is beta: docs/dagster.md lists the beta APIs strata uses.)"""
    return dg.TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions=True)


def arrival_partitions_name(source: str) -> str:
    """The dynamic partitions of an integer-keyed business-versioned source, in the instance."""
    return f"strata_{source}"


def arriving_partitions(
    spec: PartitionSpec, bounds: PartitionBounds | None, source: str, *, is_integer_keyed: bool
) -> dg.PartitionsDefinition:
    """The partitions of a business-versioned source (and of the models cut like it), which follow
    the data without reloading the definitions.

    Dates: daily (monthly) partitions from the source's `start:` on to the last complete day (month)
    by the clock, and at least to the last partition the data held when the definitions loaded:
    the usual Dagster partitions of a daily drop, so the drop of a day that has ended lands on a
    key that already exists. A key whose drop has not arrived (or is not complete) is one nothing
    materializes yet. Integers (`batch=17/`): dynamic partitions named `strata_<source>`, to which
    the stale sensor (and an observation of the source) adds each complete partition it lists.
    """
    if is_integer_keyed:
        return dg.DynamicPartitionsDefinition(name=arrival_partitions_name(source))
    return time_partitions(spec, bounds, is_open_ended=True)
