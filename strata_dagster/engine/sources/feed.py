"""A change feed: one row per change event of a key (Debezium, Fivetran, Airbyte or any log table),
read by models as the key's current row.

The current row of a key is its event at the greatest position (ties broken by the arrival column,
then by the row's hash, so duplicates and equal positions give one answer); a key whose current
event deletes it has no row, and an event after a delete restores it. A window (low, high] on the
arrival column (the position when none is declared) names the keys whose events arrived; an
upsert over the feed recomputes those keys from all their events, so events out of order or
repeated give what the whole feed gives.

A history model (`merge_strategy: history`) reads the feed as its keys' versions instead
(engine.sources.versions): one row per position of a key that does not delete it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.engine.sources.versions import EVENTS, Events, current_rows, versions
from strata_dagster.errors import E_HISTORY_SOURCE, StrataError
from strata_dagster.language.definition import Model, Source
from strata_dagster.sql.segments import window_predicate


@dataclass(frozen=True)
class Feed:
    """The change feed `source`, whose events are the rows of `table`."""

    source: Source
    table: exp.Table

    @property
    def keys(self) -> tuple[str, ...]:
        return self.source.feed_keys or ()

    @property
    def position(self) -> str:
        return self.source.versioning.column or ""

    @property
    def window_column(self) -> str:
        """What a window reads: the arrival column, else the position."""
        return self.source.versioning.arrival_column or self.position

    def is_deleted(self, qualifier: str) -> exp.Expr:
        """Whether an event (of `qualifier`) deletes its key (never NULL)."""
        deletes = self.source.deletes
        if deletes is None:
            return exp.false()
        column = exp.column(deletes.column, table=qualifier)
        if deletes.form == "debezium":
            return exp.func("coalesce", exp.EQ(this=column, expression=exp.Literal.string("d")), exp.false())
        if deletes.form == "airbyte":
            return exp.not_(exp.Is(this=column, expression=exp.null()))
        return exp.func("coalesce", exp.cast(column, "BOOLEAN"), exp.false())

    @property
    def events(self) -> Events:
        """The feed's rows as events of its keys, ranked at one position by their arrival."""
        order = []
        if self.source.versioning.arrival_column:
            order.append(exp.Ordered(this=exp.column(self.window_column, table=EVENTS), desc=True))
        return Events(self.table, self.keys, self.position, tuple(order), self.is_deleted)

    def relation(self) -> exp.Query:
        """Each key's current row: its latest event, unless that event deletes it."""
        return current_rows(self.events)

    def versions(
        self,
        keys: tuple[str, ...],
        checked: tuple[str, ...] = (),
        deleted_flag: str | None = None,
        only: Callable[[str], exp.Expr] | None = None,
    ) -> exp.Query:
        """Each key's versions (engine.sources.versions); `keys` are the feed's keys."""
        events = self.events
        if only is not None:
            narrowed = exp.select("*").from_(self.table.copy().as_("__feed_rows")).where(only("__feed_rows"))
            events = replace(events, relation=narrowed)
        return versions(events, checked, deleted_flag)

    def high(self, session: Session) -> tuple[str | None, str]:
        return session.max_value(self.table, self.window_column)

    def in_window(self, low: exp.Expr | None, high: exp.Expr, qualifier: str | None = None) -> exp.Expr:
        return window_predicate(exp.column(self.window_column, table=qualifier), low, high)

    def stamps(self) -> tuple[exp.Query | exp.Table, exp.Expr]:
        return self.table, exp.column(self.window_column)

    def checked_window(self, session: Session, low: exp.Expr, high: exp.Expr) -> str | None:
        return None


def history_source_error(model: Model, base: str, keys: tuple[str, ...] | None = None) -> StrataError:
    """Why history model `model` cannot be kept over its `from` relation `base` (`keys`: the feed's
    keys, which its merge keys do not trace to, or () for a ledger's rows; None: `base` is not a
    ledger or change feed)."""
    if keys is None:
        what = f"reads model `{base}`: a history keeps the versions of a source's rows"
        hint = "read a source: a change feed or a ledger (recomputable from its log) or a plain table"
    elif not keys:
        what = f"merges by keys that are not columns of `{base}` passed through unchanged"
        hint = f"select the merge keys from `{base}`'s columns"
    else:
        what = f"merges by keys that are not `{base}`'s feed keys ({', '.join(keys)})"
        hint = f"set `merge_keys` to the columns selected from {', '.join(keys)}"
    return StrataError(
        E_HISTORY_SOURCE,
        f"model `{model.name}` uses `merge_strategy: history` but {what}",
        model.properties.location_of("merge_strategy") or model.location,
        hint=hint,
    )
