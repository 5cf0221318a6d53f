"""A change feed: one row per change event of a key (Debezium, Fivetran, Airbyte or any log table),
read by models as the key's current row.

The current row of a key is its event at the greatest position (ties broken by the arrival column,
then by the row's hash, so duplicates and equal positions give one answer); a key whose current
event deletes it has no row, and an event after a delete restores it. A window (low, high] on the
arrival column (the position when none is declared) names the keys whose events arrived; an
upsert over the feed recomputes those keys from all their events, so events out of order or
repeated give what the whole feed gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.language.definition import Source
from strata_dagster.sql.segments import window_predicate

RANK = "__strata_feed_rank"
_EVENTS = "__feed_events"
_LATEST = "__feed_latest"


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

    def relation(self) -> exp.Query:
        """Each key's current row: its latest event, unless that event deletes it."""
        order = [exp.Ordered(this=exp.column(self.position, table=_EVENTS), desc=True)]
        if self.source.versioning.arrival_column:
            order.append(exp.Ordered(this=exp.column(self.window_column, table=_EVENTS), desc=True))
        order.append(exp.Ordered(this=exp.func("hash", exp.column(_EVENTS)), desc=True))
        rank = exp.Window(
            this=exp.RowNumber(),
            partition_by=[exp.column(key, table=_EVENTS) for key in self.keys],
            order=exp.Order(expressions=order),
        )
        latest = exp.select(exp.Star(), rank.as_(RANK)).from_(self.table.copy().as_(_EVENTS))
        star = exp.Star(except_=[exp.column(RANK)])
        return (
            exp.select(star)
            .from_(latest.subquery(_LATEST))
            .where(
                exp.and_(
                    exp.EQ(this=exp.column(RANK, table=_LATEST), expression=exp.Literal.number(1)),
                    exp.not_(self.is_deleted(_LATEST)),
                )
            )
        )

    def high(self, session: Session) -> tuple[str | None, str]:
        return session.max_value(self.table, self.window_column)

    def in_window(self, low: exp.Expr | None, high: exp.Expr, qualifier: str | None = None) -> exp.Expr:
        return window_predicate(exp.column(self.window_column, table=qualifier), low, high)

    def stamps(self) -> tuple[exp.Query | exp.Table, exp.Expr]:
        return self.table, exp.column(self.window_column)

    def checked_window(self, session: Session, low: exp.Expr, high: exp.Expr) -> str | None:
        return None
