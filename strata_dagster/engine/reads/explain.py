"""Why a model took its build path, told from what the history recorded for it.

A run records per model its path and a `detail` (the delta's window, rows read and merged, the
partitions it rebuilt, the reason a delta was not trusted). `strata history` and `strata replay`
show it through `explain`, as text and as JSON fields.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_dagster.backends.opening import open_session
from strata_dagster.engine.builds.aggregate_delta import MAINTAINED
from strata_dagster.state.history import Entry, EntryModel, HistoryReader

# What a path means when the history has nothing more specific to say.
_PATH_MEANING = {
    "reused": "inputs and code unchanged: an earlier snapshot with the same build key",
    "cutoff": "rebuilt, rows equal to the live snapshot, which stays (early cutoff)",
    "delta": "delta trusted",
    "partitions": "partition-complete rebuild of the partitions whose input changed",
    "full": "a `replace` model is always rebuilt in full",
    "view": "a `materialize: view` model: a new view over its inputs, no rows stored",
}


@dataclass(frozen=True)
class BuildExplanation:
    model: str
    partition_key: str
    path: str
    reason: str
    window: tuple[str | None, str | None] | None  # (low, high]
    lateness: str | None
    partitions: tuple[str, ...]  # rebuilt partitions, consecutive ones as ranges `a..b`
    partitions_rebuilt: int
    partitions_total: int | None
    rows_read: int | None
    rows_merged: int | None
    rows_replaced: int | None
    rows_out: int
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "partition_key": self.partition_key,
            "path": self.path,
            "reason": self.reason,
            "window": None
            if self.window is None
            else {"low": self.window[0], "high": self.window[1], "lateness": self.lateness},
            "partitions_rebuilt": self.partitions_rebuilt,
            "partition_ranges": list(self.partitions),
            "partitions_total": self.partitions_total,
            "rows_read": self.rows_read,
            "rows_merged": self.rows_merged,
            "rows_replaced": self.rows_replaced,
            "rows_out": self.rows_out,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        """One line: the reason, then the window, partitions and row figures that apply."""
        parts = [self.reason]
        if self.window is not None:
            low, high = self.window
            late = f" re-reading {self.lateness} before low" if self.lateness else ""
            parts.append(f"window ({low or '-inf'}, {high or '-'}]{late}")
        if self.partitions:
            of = f" of {self.partitions_total:,}" if self.partitions_total is not None else ""
            total = self.partitions_total if self.partitions_total is not None else self.partitions_rebuilt
            noun = "partition" if total == 1 else "partitions"
            parts.append(f"{self.partitions_rebuilt:,}{of} {noun} rebuilt: {', '.join(self.partitions)}")
        figures = [
            f"{value:,} {label}"
            for value, label in (
                (self.rows_read, "read"),
                (self.rows_merged, "merged"),
                (self.rows_replaced, "replaced"),
            )
            if value is not None
        ]
        if figures:
            parts.append("rows: " + ", ".join(figures))
        parts.extend(f"note: {note}" for note in self.notes)
        return "; ".join(parts)


@dataclass(frozen=True)
class EntryBuilds:
    """A history entry and how each model it built or reused was built."""

    entry: Entry
    builds: tuple[BuildExplanation, ...]


def history(warehouse: Path) -> list[EntryBuilds]:
    """The whole history, oldest first, with each entry's builds explained."""
    return history_and_interruptions(warehouse)[0]


def history_and_interruptions(warehouse: Path) -> tuple[list[EntryBuilds], tuple[str, ...]]:
    """The history, and the publications a crash cut short since (their commit ids): on a backend
    without transactions (Spark), some live views may then show what no entry records, until the
    next writing command repoints them."""
    with open_session(warehouse, read_only=True) as session:
        interrupted = tuple(commit.commit_id for commit in session.interrupted)
        if not session.has_history():
            return [], interrupted  # sample data but no run yet
        reader = session.history
        return [
            EntryBuilds(entry, explain_entry(reader, entry.entry)) for entry in reader.entries()
        ], interrupted


def explain_entry(reader: HistoryReader, entry: int) -> tuple[BuildExplanation, ...]:
    return tuple(explain(model, _grain(reader, model)) for model in reader.entry_models(entry))


def _grain(reader: HistoryReader, model: EntryModel) -> str | None:
    if not model.detail.get("partitions"):
        return None
    record = reader.snapshot(model.snapshot_id)
    return None if record is None else record.detail.get("partition_grain")


def explain(model: EntryModel, grain: str | None = None) -> BuildExplanation:
    """`grain` ("day" / "month") of a partitioned model, to write its partitions as ranges."""
    detail = model.detail
    window = detail.get("window") if isinstance(detail.get("window"), Mapping) else None
    partitions = detail.get("partitions") or ()
    return BuildExplanation(
        model=model.model,
        partition_key=model.partition_key,
        path=model.path,
        reason=_reason(model.path, detail, len(partitions)),
        window=None if window is None else (_text(window.get("low")), _text(window.get("high"))),
        lateness=None if window is None else _text(window.get("lateness")),
        partitions=partition_ranges(partitions, grain),
        partitions_rebuilt=len(partitions),
        partitions_total=_int(detail.get("partitions_total")),
        rows_read=_int(detail.get("rows_read")),
        rows_merged=_int(detail.get("rows_merged")),
        rows_replaced=_int(detail.get("rows_replaced")),
        rows_out=model.rows_out,
        notes=tuple(str(note) for note in detail.get("notes") or ()),
    )


def build_why(
    model: str, path: str, detail: Mapping[str, Any], rows_out: int, grain: str | None = None
) -> str:
    """The one line history shows for a build (`strata history`), for a build just made: what
    Dagster shows as `strata/why` on its materialization."""
    entry = EntryModel(model, "", "", "", path, rows_out, 0.0, "", dict(detail))
    return explain(entry, grain).text()


def _reason(path: str, detail: Mapping[str, Any], partitions: int) -> str:
    if path == "full" and "full_reason" in detail:
        return f"full: {detail['full_reason'] or 'no delta possible'}"
    if path == "delta" and "partitions_entering" in detail:
        moved = [
            f"{sign}{', '.join(str(key) for key in detail[name])}"
            for sign, name in (("+", "partitions_entering"), ("-", "partitions_leaving"))
            if detail.get(name)
        ]
        return f"sliding window moved ({'; '.join(moved)}): aggregates kept from the weighted delta"
    if path == "cutoff" and "partitions_entering" in detail:
        return "the sliding window did not move: the live snapshot stays"
    if path == "cutoff" and partitions == 0 and ("window" in detail or "partitions" in detail):
        return "no row changed in the window: the live snapshot stays"
    if path == "partitions" and detail.get("requested_partitions"):
        return "partition-complete rebuild of the partitions requested with --partitions"
    maintained = detail.get(MAINTAINED)
    if path == "partitions" and isinstance(maintained, Mapping):
        recomputed = maintained.get("partitions_recomputed") or []
        if len(recomputed) == partitions:
            return "partition-complete rebuild: the input's delta did not decide every affected partition's aggregates"
        how = f"aggregates of {maintained.get('groups', 0):,} groups maintained from the input's delta"
        return how + (f", {len(recomputed):,} partition(s) recomputed in full" if recomputed else "")
    if path == "partitions" and detail.get("row_wise"):
        return f"row-wise delta: the slices by `{detail['row_wise']}` whose source rows changed, recomputed"
    if path == "delta" and detail.get("row_wise"):
        return f"appended delta: what the pipeline gives for {detail['row_wise']}"
    return _PATH_MEANING.get(path, path)


def partition_ranges(keys: Iterable[str], grain: str | None = None) -> tuple[str, ...]:
    """Sorted partition keys with consecutive days (or months) folded into `first..last`."""
    values = sorted({str(key) for key in keys})
    dates = [_date(value) for value in values]
    if grain not in ("day", "month") or any(date is None for date in dates):
        return tuple(values)
    ranges: list[tuple[dt.date, dt.date]] = []
    for date in dates:
        assert date is not None
        if ranges and _next(ranges[-1][1], grain) == date:
            ranges[-1] = (ranges[-1][0], date)
        else:
            ranges.append((date, date))
    return tuple(
        _label(first, grain) if first == last else f"{_label(first, grain)}..{_label(last, grain)}"
        for first, last in ranges
    )


def _next(date: dt.date, grain: str) -> dt.date | None:
    try:
        if grain == "day":
            return date + dt.timedelta(days=1)
        return (date.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    except OverflowError:
        return None


def _label(date: dt.date, grain: str) -> str:
    return date.strftime("%Y-%m") if grain == "month" else date.isoformat()


def _date(value: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(value[:10])
    except ValueError:
        return None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
