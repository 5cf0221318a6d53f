"""What `strata verify` checks of a history model over a plain table, which no log recomputes.

Its versions depend on when builds ran, so a full rebuild cannot give them. What a table can
prove is checked instead: the current versions are the model's rows computed from the table now
(compared as row-hash multisets over the keys and checked columns, else every column but the
history's), every version's interval is well
formed (`valid_from` set and before `valid_to`, `is_current` exactly when `valid_to` is NULL, no
two versions of a key overlapping), and no key has more than one current version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.engine.sources.versions import IS_CURRENT, VALID_FROM, VALID_TO
from strata_dagster.language.definition import HISTORY_COLUMNS, Model

_PREVIOUS_FROM, _PREVIOUS_TO = "__previous_from", "__previous_to"


@dataclass(frozen=True)
class TableHistoryCheck:
    """The checks of a history over a plain table beside its current rows' comparison."""

    bad_intervals: int  # versions whose interval is malformed or overlaps the key's previous one
    keys_not_one_current: int  # keys with more than one current version

    @property
    def is_equal(self) -> bool:
        return self.bad_intervals == 0 and self.keys_not_one_current == 0

    def as_metadata(self) -> dict[str, Any]:
        return {
            "bad_intervals": self.bad_intervals,
            "keys_with_several_current_versions": self.keys_not_one_current,
        }


def compared_columns(model: Model, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The output columns the current versions are compared on: the keys and the checked columns
    (a change of another column opens no version), else all but the history's."""
    props = model.properties
    if props.check_columns:
        return tuple(dict.fromkeys([*(props.merge_keys or ()), *props.check_columns]))
    return tuple(name for name in columns if name not in (*HISTORY_COLUMNS, props.deleted_flag))


def current_versions(live: exp.Table) -> exp.Select:
    return exp.select("*").from_(live.copy()).where(exp.column(IS_CURRENT))


def check_versions(session: Session, model: Model, live: exp.Table) -> TableHistoryCheck:
    """The interval and one-current-version checks over the live view `live`."""
    keys = [exp.column(key) for key in model.properties.merge_keys or ()]
    valid_from, valid_to, is_current = (exp.column(name) for name in (VALID_FROM, VALID_TO, IS_CURRENT))

    def previous(column: exp.Column) -> exp.Window:
        return exp.Window(
            this=exp.func("lag", column.copy()),
            partition_by=[key.copy() for key in keys],
            order=exp.Order(expressions=[exp.Ordered(this=valid_from.copy())]),
        )

    previous_from, previous_to = exp.column(_PREVIOUS_FROM), exp.column(_PREVIOUS_TO)
    is_malformed = exp.or_(
        exp.Is(this=valid_from.copy(), expression=exp.null()),
        exp.LT(this=valid_to.copy(), expression=valid_from.copy()),
        exp.NullSafeNEQ(
            this=is_current.copy(),
            expression=exp.Paren(this=exp.Is(this=valid_to.copy(), expression=exp.null())),
        ),
        # The key's previous version still open, or closed after this one opened.
        exp.and_(
            exp.not_(exp.Is(this=previous_from, expression=exp.null())),
            exp.or_(
                exp.Is(this=previous_to.copy(), expression=exp.null()),
                exp.GT(this=previous_to.copy(), expression=valid_from.copy()),
            ),
        ),
    )
    with_previous = exp.select(
        "*", previous(valid_from).as_(_PREVIOUS_FROM), previous(valid_to).as_(_PREVIOUS_TO)
    ).from_(live.copy())
    intervals = (
        exp.select(exp.func("count", exp.Star()))
        .from_(with_previous.subquery("__versions"))
        .where(is_malformed)
    )
    several = (
        exp.select(*keys)
        .from_(live.copy())
        .where(is_current.copy())
        .group_by(*(key.copy() for key in keys))
        .having(exp.GT(this=exp.func("count", exp.Star()), expression=exp.Literal.number(1)))
    )
    counted = exp.select(exp.func("count", exp.Star())).from_(several.subquery("__several"))
    _, bad = session.read_rows(intervals)
    _, many = session.read_rows(counted)
    return TableHistoryCheck(int(bad[0][0]), int(many[0][0]))
