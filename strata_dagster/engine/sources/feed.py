"""A change feed: one row per change event of a key (Debezium, Fivetran, Airbyte or any log table),
read by models as the key's current row.

The current row of a key is its event at the greatest position (ties broken by the arrival column,
then by the row's hash, so duplicates and equal positions give one answer); a key whose current
event deletes it has no row, and an event after a delete restores it. A window (low, high] on the
arrival column (the position when none is declared) names the keys whose events arrived; an
upsert over the feed recomputes those keys from all their events, so events out of order or
repeated give what the whole feed gives.

A history model (`merge_strategy: history`) reads the feed as its keys' versions instead: one row
per position of a key (the event there, ties broken as above) that does not delete it, with
`valid_from` (its position), `valid_to` (the key's next position, NULL while current) and
`is_current`; a delete closes the version before it, and a later event opens a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.errors import E_HISTORY_SOURCE, StrataError
from strata_dagster.language.definition import HISTORY_COLUMNS, Model, Source
from strata_dagster.sql.segments import window_predicate

RANK = "__strata_feed_rank"
_EVENTS = "__feed_events"
_LATEST = "__feed_latest"
_AT = "__feed_at"
_VERSIONS = "__feed_versions"
VALID_FROM, VALID_TO, IS_CURRENT = HISTORY_COLUMNS
_DELETES = "__strata_feed_deletes"
_OPENS = "__strata_feed_opens"
_CHANGES = "__feed_changes"


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
        return self._ranked_rows(order, list(self.keys))

    def versions(self, checked: tuple[str, ...] = ()) -> exp.Query:
        """Each key's versions: the event at each of its positions, unless it deletes the key, valid
        from its position to the key's next one (NULL: current). With `checked` columns, an event
        that leaves them as they were opens no version: its version began at the first event of
        the run of equal values."""
        at_position = self._ranked_rows([], [*self.keys, self.position], keep_deletes=True)
        if checked:
            at_position = self._changes(at_position, checked)
        next_position = self._over_key(exp.func("lead", exp.column(self.position, table=_AT)))
        flagged = exp.select(
            exp.Star(except_=[exp.column(_DELETES)]),
            exp.column(self.position, table=_AT).as_(VALID_FROM),
            next_position.as_(VALID_TO),
            exp.Is(this=next_position.copy(), expression=exp.null()).as_(IS_CURRENT),
            exp.column(_DELETES, table=_AT).as_(_DELETES),
        ).from_(at_position.subquery(_AT))
        return (
            exp.select(exp.Star(except_=[exp.column(_DELETES)]))
            .from_(flagged.subquery(_VERSIONS))
            .where(exp.not_(exp.column(_DELETES, table=_VERSIONS)))
        )

    def _over_key(self, function: exp.Expr) -> exp.Window:
        """`function` over the events of a key (of `_AT`), in position order."""
        return exp.Window(
            this=function,
            partition_by=[exp.column(key, table=_AT) for key in self.keys],
            order=exp.Order(expressions=[exp.Ordered(this=exp.column(self.position, table=_AT))]),
        )

    def _changes(self, at_position: exp.Query, checked: tuple[str, ...]) -> exp.Query:
        """The events of `at_position` that open a version or delete: a key's first, one after a
        delete, or one whose `checked` columns differ from its previous event's."""

        def previous(column: str) -> exp.Window:
            return self._over_key(exp.func("lag", exp.column(column, table=_AT)))

        opens = exp.or_(
            exp.column(_DELETES, table=_AT),
            exp.Is(this=previous(self.position), expression=exp.null()),
            exp.func("coalesce", previous(_DELETES), exp.false()),
            *(
                exp.NullSafeNEQ(this=exp.column(column, table=_AT), expression=previous(column))
                for column in checked
            ),
        )
        flagged = exp.select(exp.Star(), opens.as_(_OPENS)).from_(at_position.subquery(_AT))
        return (
            exp.select(exp.Star(except_=[exp.column(_OPENS)]))
            .from_(flagged.subquery(_CHANGES))
            .where(exp.column(_OPENS, table=_CHANGES))
        )

    def _ranked_rows(
        self, order: list[exp.Ordered], partition: list[str], keep_deletes: bool = False
    ) -> exp.Query:
        """The event ranked first in each `partition` (by `order`, then arrival, then hash): without
        deletes, or with a column saying whether it deletes its key."""
        if self.source.versioning.arrival_column:
            order.append(exp.Ordered(this=exp.column(self.window_column, table=_EVENTS), desc=True))
        order.append(exp.Ordered(this=exp.func("hash", exp.column(_EVENTS)), desc=True))
        rank = exp.Window(
            this=exp.RowNumber(),
            partition_by=[exp.column(column, table=_EVENTS) for column in partition],
            order=exp.Order(expressions=order),
        )
        latest = exp.select(exp.Star(), rank.as_(RANK)).from_(self.table.copy().as_(_EVENTS))
        star = exp.Star(except_=[exp.column(RANK)])
        is_first = exp.EQ(this=exp.column(RANK, table=_LATEST), expression=exp.Literal.number(1))
        if keep_deletes:
            return (
                exp.select(star, self.is_deleted(_LATEST).as_(_DELETES))
                .from_(latest.subquery(_LATEST))
                .where(is_first)
            )
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


def history_source_error(model: Model, base: str, keys: tuple[str, ...] | None = None) -> StrataError:
    """Why history model `model` cannot be kept over its `from` relation `base` (`keys`: the feed's
    keys, which its merge keys do not trace to; None: `base` is not a change feed)."""
    if keys is None:
        what = f"reads `{base}`, which is not a change feed: its versions cannot be recomputed"
        hint = "read a source declared `versioning: feed(position)` with `feed_keys`"
    else:
        what = f"merges by keys that are not `{base}`'s feed keys ({', '.join(keys)})"
        hint = f"set `merge_keys` to the columns selected from {', '.join(keys)}"
    return StrataError(
        E_HISTORY_SOURCE,
        f"model `{model.name}` uses `merge_strategy: history` but {what}",
        model.properties.location_of("merge_strategy") or model.location,
        hint=hint,
    )
