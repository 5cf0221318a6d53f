"""A ledger source: every row carries the transaction that wrote it, and a ledger relation lists the
transactions (id, committed_at, kind APPEND, UPDATE or SNAPSHOT).

The window (low, high] is on committed_at, high the ledger's latest commit read at build start; its
delta is the rows of the window's transactions. A delta is taken only when every transaction of
the window is APPEND or UPDATE: a SNAPSHOT rewrote the source, so the build is full and says so. A
transaction of the window whose rows the source no longer holds (drained, compacted away), and
that no later UPDATE rewrote, stops the build (E091) instead of giving an empty delta. Models read only the rows of committed
transactions, so a full build and the sum of deltas read the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.engine.sources.versions import EVENTS, Events, versions
from strata_dagster.errors import E_LEDGER_DRAINED, StrataError
from strata_dagster.language.definition import Source
from strata_dagster.sql.render import render
from strata_dagster.sql.segments import window_predicate

SNAPSHOT = "SNAPSHOT"
STAMP = "__strata_committed"
DELTA_KINDS = ("APPEND", "UPDATE")
_SHOWN = 5  # transactions named in a message


@dataclass(frozen=True)
class Ledger:
    """The ledger of `source`, whose rows are `table` and whose transactions are `ledger`."""

    source: Source
    table: exp.Table
    ledger: exp.Table

    @property
    def txn(self) -> str:
        return self.source.versioning.txn_column or ""

    @property
    def committed(self) -> str:
        return self.source.versioning.committed_column or ""

    @property
    def kind(self) -> str:
        return self.source.versioning.kind_column or ""

    def transactions(self, low: exp.Expr | None, high: exp.Expr, *columns: str) -> exp.Select:
        """The ledger's transactions committed in (low, high]: `columns` of them (their ids)."""
        wanted = columns or (self.txn,)
        return (
            exp.select(*(exp.column(column) for column in wanted))
            .from_(self.ledger.copy())
            .where(window_predicate(exp.column(self.committed), low, high))
        )

    def relation(self) -> exp.Query:
        """The rows of committed transactions (a row whose transaction is in no ledger entry is
        not committed yet: no window would ever bring it)."""
        committed = exp.select(exp.column(self.txn)).from_(self.ledger.copy())
        row_txn = exp.column(self.txn, table="__ledger_rows")
        return (
            exp.select("*").from_(self.table.copy().as_("__ledger_rows")).where(row_txn.isin(query=committed))
        )

    def versions(
        self,
        keys: tuple[str, ...],
        checked: tuple[str, ...] = (),
        deleted_flag: str | None = None,
        only: Callable[[str], exp.Expr] | None = None,
    ) -> exp.Query:
        """Each key's versions by its transactions' commits (engine.sources.versions): a ledger
        deletes no key, so a version closes only when the key's next transaction commits."""
        return versions(self._events(keys, only), checked, deleted_flag)

    def _events(self, keys: tuple[str, ...], only: Callable[[str], exp.Expr] | None) -> Events:
        """The committed rows, each with its transaction's commit as its position; transactions
        committed together rank by id."""
        rows, stamps = exp.column(self.txn, table="__rows"), exp.column(self.txn, table="__txn")
        stamped = (
            exp.select(
                exp.Column(this=exp.Star(), table=exp.to_identifier("__rows")),
                exp.column(self.committed, table="__txn").as_(STAMP),
            )
            .from_(self.table.copy().as_("__rows"))
            .join(self.ledger.copy().as_("__txn"), on=exp.EQ(this=rows, expression=stamps))
        )
        if only is not None:
            stamped = stamped.where(only("__rows"))
        order = (exp.Ordered(this=exp.column(self.txn, table=EVENTS), desc=True),)
        return Events(stamped, keys, STAMP, order, lambda _qualifier: exp.false(), hidden=(STAMP,))

    def high(self, session: Session) -> tuple[str | None, str]:
        return session.max_value(self.ledger, self.committed)

    def in_window(self, low: exp.Expr | None, high: exp.Expr, qualifier: str | None = None) -> exp.Expr:
        return exp.column(self.txn, table=qualifier).isin(query=self.transactions(low, high))

    def stamps(self) -> tuple[exp.Query | exp.Table, exp.Expr]:
        """Each committed row with its transaction's commit (a ledger lists a transaction once)."""
        joined = (
            exp.select(exp.column(self.committed, table="__txn").as_(STAMP))
            .from_(self.table.copy().as_("__rows"))
            .join(
                self.ledger.copy().as_("__txn"),
                on=exp.EQ(
                    this=exp.column(self.txn, table="__rows"), expression=exp.column(self.txn, table="__txn")
                ),
            )
        )
        return joined, exp.column(STAMP)

    def checked_window(self, session: Session, low: exp.Expr, high: exp.Expr) -> str | None:
        """A SNAPSHOT in the window makes the build full; a transaction of it without rows stops it."""
        kind = exp.func("coalesce", exp.Upper(this=exp.column(self.kind)), exp.Literal.string(""))
        others = (
            self.transactions(low, high, self.txn, self.kind)
            .where(exp.not_(kind.isin(*(exp.Literal.string(name) for name in DELTA_KINDS))))
            .order_by(exp.column(self.committed), exp.column(self.txn))
            .limit(_SHOWN)
        )
        _, rows = session.read_rows(others)
        snapshots = [str(txn) for txn, kind in rows if str(kind).upper() == SNAPSHOT]
        if snapshots:
            return (
                f"transaction {snapshots[0]} in the window is a SNAPSHOT of `{self.source.name}` "
                "(the source was rewritten): only a full build reads it"
            )
        if rows:
            return (
                f"the window of `{self.source.name}`'s ledger holds a transaction of kind `{rows[0][1]}`, "
                "neither APPEND, UPDATE nor SNAPSHOT: only a full build is sure to read it"
            )
        self._check_not_drained(session, low, high)
        return None

    def _check_not_drained(self, session: Session, low: exp.Expr, high: exp.Expr) -> None:
        """Every transaction of the window still holds rows in the source: rows are written once,
        by the transaction they carry, and leave only when a later UPDATE rewrites them."""
        held = (
            exp.select(exp.Literal.number(1))
            .from_(self.table.copy().as_("__held"))
            .where(
                exp.EQ(
                    this=exp.column(self.txn, table="__held"), expression=exp.column(self.txn, table="__txn")
                )
            )
        )
        window = window_predicate(exp.column(self.committed, table="__txn"), low, high)
        # An UPDATE committed later may have rewritten the transaction's rows: not a drain.
        later, this = exp.column(self.committed, table="__later"), exp.column(self.committed, table="__txn")
        is_later = exp.or_(
            exp.GT(this=later, expression=this),
            exp.and_(
                exp.EQ(this=later.copy(), expression=this.copy()),
                exp.GT(
                    this=exp.column(self.txn, table="__later"), expression=exp.column(self.txn, table="__txn")
                ),
            ),
        )
        rewritten = (
            exp.select(exp.Literal.number(1))
            .from_(self.ledger.copy().as_("__later"))
            .where(
                exp.and_(
                    is_later,
                    exp.LTE(this=later.copy(), expression=high.copy()),
                    exp.EQ(
                        this=exp.Upper(this=exp.column(self.kind, table="__later")),
                        expression=exp.Literal.string("UPDATE"),
                    ),
                )
            )
        )
        empty = (
            exp.select(exp.column(self.txn, table="__txn"))
            .from_(self.ledger.copy().as_("__txn"))
            .where(exp.and_(window, exp.not_(exp.Exists(this=held)), exp.not_(exp.Exists(this=rewritten))))
            .order_by(exp.column(self.txn, table="__txn"))
        )
        _, rows = session.read_rows(empty)
        missing = [str(row[0]) for row in rows]
        if not missing:
            return
        shown = ", ".join(missing[:_SHOWN]) + (
            f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        )
        raise StrataError(
            E_LEDGER_DRAINED,
            f"the ledger `{render(self.ledger)}` lists {len(missing)} transaction(s) in the window of source "
            f"`{self.source.name}` whose rows `{render(self.table)}` no longer holds ({shown}): the source was "
            "drained or compacted, and a delta would silently miss them",
            self.source.location,
            hint="restore the rows (or read them from where they were moved) and run again; "
            "`strata run --full-refresh` rebuilds from the rows the source holds now",
        )
