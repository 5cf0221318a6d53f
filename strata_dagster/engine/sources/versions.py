"""A log read as its keys' versions: what a history model (`merge_strategy: history`) computes over.

A log's events (a change feed's rows, a ledger's committed rows with their transaction's commit)
each belong to a key and a position. The version of a key at a position is its event there (ties
broken by the log's order, then the row's hash, so duplicates give one answer) unless that event
deletes the key; it is valid from its position (`valid_from`) to the key's next position
(`valid_to`, NULL while current) and `is_current` while open. A delete closes the version before
it, and a later event opens a new one. With checked columns, an event that leaves them as they
were opens no version. A declared deleted flag says of each version whether a delete closed it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.language.definition import HISTORY_COLUMNS

VALID_FROM, VALID_TO, IS_CURRENT = HISTORY_COLUMNS
EVENTS = "__log_events"
_RANK = "__strata_log_rank"
_RANKED = "__log_ranked"
_AT = "__log_at"
_VERSIONS = "__log_versions"
_CHANGES = "__log_changes"
_DELETES = "__strata_log_deletes"
_OPENS = "__strata_log_opens"


@dataclass(frozen=True)
class Events:
    """A log's events as versions read them.

    Attributes:
        relation: one row per event.
        keys: the columns naming the key an event applies to.
        position: the column ordering a key's events.
        order: how events at one position rank (over `EVENTS`), before the row's hash.
        is_deleted: whether an event (of a qualifier) deletes its key, never NULL.
        hidden: columns of `relation` that are not the log's own (left out of the versions).
    """

    relation: exp.Query | exp.Table
    keys: tuple[str, ...]
    position: str
    order: tuple[exp.Ordered, ...]
    is_deleted: Callable[[str], exp.Expr]
    hidden: tuple[str, ...] = ()


def first_events(events: Events, partition: list[str], order: list[exp.Ordered]) -> exp.Select:
    """The event ranked first in each `partition` (by `order`, the log's order, then the row's
    hash), with a column saying whether it deletes its key."""
    ranking = [*order, *(item.copy() for item in events.order)]
    ranking.append(exp.Ordered(this=exp.func("hash", exp.column(EVENTS)), desc=True))
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column(column, table=EVENTS) for column in partition],
        order=exp.Order(expressions=ranking),
    )
    relation = events.relation.copy()
    source = relation.subquery(EVENTS) if isinstance(relation, exp.Query) else relation.as_(EVENTS)
    ranked = exp.select(exp.Star(), rank.as_(_RANK)).from_(source)
    return (
        exp.select(exp.Star(except_=[exp.column(_RANK)]), events.is_deleted(_RANKED).as_(_DELETES))
        .from_(ranked.subquery(_RANKED))
        .where(exp.EQ(this=exp.column(_RANK, table=_RANKED), expression=exp.Literal.number(1)))
    )


def current_rows(events: Events) -> exp.Select:
    """Each key's current row: its latest event, unless that event deletes it."""
    latest = first_events(
        events, list(events.keys), [exp.Ordered(this=exp.column(events.position, table=EVENTS), desc=True)]
    )
    hidden = [exp.column(_DELETES), *(exp.column(name) for name in events.hidden)]
    return (
        exp.select(exp.Star(except_=hidden))
        .from_(latest.subquery(_RANKED + "_latest"))
        .where(exp.not_(exp.column(_DELETES, table=_RANKED + "_latest")))
    )


def versions(events: Events, checked: tuple[str, ...] = (), deleted_flag: str | None = None) -> exp.Select:
    """Each key's versions (see the module): the event at each of its positions, unless it deletes
    the key, valid from its position to the key's next one. With `checked` columns a version
    begins at the first event of a run of equal values; `deleted_flag` names a column saying
    whether a delete closed the version."""
    at_position = first_events(events, [*events.keys, events.position], [])
    if checked:
        at_position = _changes(events, at_position, checked)
    next_position = _over_key(events, exp.func("lead", exp.column(events.position, table=_AT)))
    columns: list[exp.Expr] = [
        exp.Star(except_=[exp.column(_DELETES), *(exp.column(name) for name in events.hidden)]),
        exp.column(events.position, table=_AT).as_(VALID_FROM),
        next_position.as_(VALID_TO),
        exp.Is(this=next_position.copy(), expression=exp.null()).as_(IS_CURRENT),
    ]
    if deleted_flag is not None:
        closed_by_delete = _over_key(events, exp.func("lead", exp.column(_DELETES, table=_AT)))
        columns.append(exp.func("coalesce", closed_by_delete, exp.false()).as_(deleted_flag))
    flagged = exp.select(*columns, exp.column(_DELETES, table=_AT).as_(_DELETES)).from_(
        at_position.subquery(_AT)
    )
    return (
        exp.select(exp.Star(except_=[exp.column(_DELETES)]))
        .from_(flagged.subquery(_VERSIONS))
        .where(exp.not_(exp.column(_DELETES, table=_VERSIONS)))
    )


def _over_key(events: Events, function: exp.Expr) -> exp.Window:
    """`function` over the events of a key (of `_AT`), in position order."""
    return exp.Window(
        this=function,
        partition_by=[exp.column(key, table=_AT) for key in events.keys],
        order=exp.Order(expressions=[exp.Ordered(this=exp.column(events.position, table=_AT))]),
    )


def _changes(events: Events, at_position: exp.Select, checked: tuple[str, ...]) -> exp.Select:
    """The events of `at_position` that open a version or delete: a key's first, one after a
    delete, or one whose `checked` columns differ from its previous event's."""

    def previous(column: str) -> exp.Window:
        return _over_key(events, exp.func("lag", exp.column(column, table=_AT)))

    opens = exp.or_(
        exp.column(_DELETES, table=_AT),
        exp.Is(this=previous(events.position), expression=exp.null()),
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


def stamped_rows(
    relation: exp.Query | exp.Table, at: exp.Expr, deleted_flag: str | None = None
) -> exp.Select:
    """A plain relation's rows as current versions opened at `at` (a history over a table without
    a log: what a build compares with the versions it kept)."""
    timestamp = exp.DataType.build("TIMESTAMP")
    columns: list[exp.Expr] = [
        exp.Star(),
        exp.cast(at.copy(), timestamp).as_(VALID_FROM),
        exp.cast(exp.null(), timestamp).as_(VALID_TO),
        exp.true().as_(IS_CURRENT),
    ]
    if deleted_flag is not None:
        columns.append(exp.false().as_(deleted_flag))
    source = relation.copy()
    return exp.select(*columns).from_(source.subquery("__rows") if isinstance(source, exp.Query) else source)
