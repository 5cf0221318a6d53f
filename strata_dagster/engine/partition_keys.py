"""`--partitions` values: days (2026-01-05), months (2026-01), ranges `a..b` of either, in
comma-separated lists; shared by `strata run`, `strata backfill` and `strata verify`.

Parsing checks the text alone (E040 for anything that is no day, month or ordered range);
`keys_for_model` turns requests into the ISO partition keys of one partitioned model (a day, or a
month by its first day: the keys the history, the views and Dagster use) and refuses any that is
not a partition of that model: a month for a day model and the reverse, a key before the first
partition (a partitioned source's `start`, else the data's first partition), or one in the future
beyond the data.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from strata_dagster.errors import E_VERIFY_PARTITIONS, StrataError

RANGE_SEPARATOR = ".."
PartitionGrain = Literal["day", "month"]
_DAY_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_MONTH_TEXT = re.compile(r"\d{4}-\d{2}")
_FORMAT_HINT = (
    "write days as YYYY-MM-DD, months as YYYY-MM and ranges as first..last, separated by commas, "
    "e.g. --partitions 2026-01-01..2026-01-31,2026-02-05"
)


def after(day: dt.date, grain: str) -> dt.date:
    """The first day after the partition that starts on `day`. OverflowError past year 9999."""
    if grain == "month":
        if day.year == dt.MAXYEAR and day.month == 12:
            raise OverflowError("date value out of range")
        return dt.date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return day + dt.timedelta(days=1)


@dataclass(frozen=True)
class PartitionRequest:
    """One `--partitions` item: a day, a month (by its first day), or a range of either."""

    text: str
    grain: PartitionGrain
    start: dt.date
    last: dt.date | None = None  # the range's last partition (inclusive); None: `start` alone

    @property
    def final(self) -> dt.date:
        return self.last or self.start

    @property
    def end(self) -> dt.date:
        """The first day after the request (parsing made sure there is one)."""
        return after(self.final, self.grain)

    def partitions(self) -> Iterable[dt.date]:
        day = self.start
        while day <= self.final:
            yield day
            day = after(day, self.grain)


def _one(text: str, whole: str) -> tuple[PartitionGrain, dt.date]:
    try:
        if _DAY_TEXT.fullmatch(text):
            return "day", dt.date.fromisoformat(text)
        if _MONTH_TEXT.fullmatch(text):
            return "month", dt.date.fromisoformat(f"{text}-01")
    except ValueError:
        pass
    raise StrataError(
        E_VERIFY_PARTITIONS, f"`{whole}` is neither a day, a month nor a range of them", hint=_FORMAT_HINT
    )


def parse_request(text: str) -> PartitionRequest:
    value = text.strip()
    first_text, separator, last_text = value.partition(RANGE_SEPARATOR)
    grain, start = _one(first_text.strip(), value)
    last = None
    if separator:
        last_grain, last = _one(last_text.strip(), value)
        if last_grain != grain:
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"range `{value}` mixes a {grain} and a {last_grain}",
                hint="give both ends as days (2026-01-01..2026-01-31) or both as months (2026-01..2026-03)",
            )
        if last < start:
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"range `{value}` ends before it starts",
                hint=f"write the earlier partition first: {last_text.strip()}..{first_text.strip()}",
            )
    request = PartitionRequest(value, grain, start, last)
    try:
        after(request.final, grain)
    except OverflowError:
        raise StrataError(
            E_VERIFY_PARTITIONS,
            f"`{value}` reaches the last day a date can hold: no model has such a partition",
            hint=_FORMAT_HINT,
        ) from None
    return request


def parse_partitions(values: Iterable[str]) -> tuple[PartitionRequest, ...]:
    """Every item of `values`, each itself possibly a comma-separated list; empty items are
    skipped, but values that hold no item at all are E040 (not a way to say "all")."""
    given = tuple(values)
    requests = tuple(parse_request(item) for value in given for item in value.split(",") if item.strip())
    if given and not requests:
        raise StrataError(
            E_VERIFY_PARTITIONS,
            f"the partition selection {', '.join(repr(value) for value in given)} names no partition",
            hint=_FORMAT_HINT + "; or give no --partitions",
        )
    return requests


def partition_of(day: dt.date, grain: str) -> dt.date:
    return day.replace(day=1) if grain == "month" else day


def request_grain(model_grain: str) -> PartitionGrain:
    """The grain of the keys a model with `model_grain` takes (a plain date key column: days)."""
    return "month" if model_grain == "month" else "day"


def keys_for_model(
    name: str,
    model_grain: str,
    requests: Iterable[PartitionRequest],
    first: dt.date | None,
    last: dt.date | None,
    today: dt.date,
    *,
    first_is_start: bool = False,
) -> tuple[str, ...]:
    """The ISO keys of model `name`'s partitions the requests name, checked against its partitions:
    from `first` (the declared `start` when `first_is_start`, else the data's first partition; None
    when the data holds no row yet) to the later of the data's `last` partition and today's."""
    grain = request_grain(model_grain)
    if first is None:
        raise StrataError(
            E_VERIFY_PARTITIONS,
            f"model `{name}` has no partitions yet: its inputs hold no dated row",
            subject=name,
            hint=f"load its sources, then run `strata run PROJECT --models {name}`",
        )
    lower = partition_of(first, grain)
    upper = max(partition_of(last or first, grain), partition_of(today, grain))
    keys: dict[str, None] = {}
    for request in requests:
        if request.grain != grain:
            example = "2026-01" if grain == "month" else "2026-01-05"
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"`{request.text}` names {request.grain}s, but model `{name}` is partitioned by {model_grain}",
                subject=name,
                hint=f"give {grain}s for `{name}`, e.g. --partitions {example}",
            )
        if request.start < lower:
            since = (
                f"its `start` {first.isoformat()}"
                if first_is_start
                else f"its data's first partition {lower.isoformat()}"
            )
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"`{request.text}` lies before the partitions of model `{name}`, which begin with {since}",
                subject=f"{name}/{request.start.isoformat()}",
                hint=f"ask for partitions from {lower.isoformat()} on",
            )
        if request.final > upper:
            raise StrataError(
                E_VERIFY_PARTITIONS,
                f"`{request.text}` lies in the future beyond the data of model `{name}` "
                f"(its last partition is {upper.isoformat()})",
                subject=f"{name}/{request.final.isoformat()}",
                hint=f"ask for partitions up to {upper.isoformat()}",
            )
        keys.update((day.isoformat(), None) for day in request.partitions())
    return tuple(sorted(keys))


def as_request_texts(model_grain: str, keys: Iterable[str]) -> tuple[str, ...]:
    """Partition keys as the engine keys them (ISO days; months by their first day) written as
    `--partitions` items: a month model's keys as months."""
    return tuple(key[:7] if model_grain == "month" else key for key in keys)


def describe_keys(keys: Iterable[str], model_grain: str) -> str:
    """`2026-01-01..2026-01-31, 2026-02-05`: consecutive partitions as ranges."""
    grain = request_grain(model_grain)
    days = sorted(dt.date.fromisoformat(key) for key in keys)
    runs: list[list[dt.date]] = []
    for day in days:
        if runs and after(runs[-1][-1], grain) == day:
            runs[-1].append(day)
        else:
            runs.append([day])

    def text(day: dt.date) -> str:
        return day.isoformat()[:7] if grain == "month" else day.isoformat()

    return ", ".join(
        text(run[0]) if len(run) == 1 else f"{text(run[0])}{RANGE_SEPARATOR}{text(run[-1])}" for run in runs
    )
