"""The delta of a history model over a plain table (no ledger, no change feed): versions kept by
comparing the table's rows now with the current versions the model holds.

Each build reads the model's rows as the table gives them now, each a current version opened at
the build's time. A key whose current version differs from its row now (in the checked columns,
or in every column but the history's), or that left the table, has its current version closed at
the build's time (`valid_to`; the deleted flag when it left); a key that is new or changed opens
its row now as a version. Closed versions stay as they were. The versions therefore depend on
when builds ran: no log recomputes them, and `strata verify` checks what a table can prove
(engine.commands.table_history_check) instead of comparing with a full rebuild.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from strata_dagster.engine.builds.incremental import DeltaBuilder, Fallback
from strata_dagster.engine.builds.segment import DeltaBuild
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.engine.sources.versions import IS_CURRENT, VALID_TO
from strata_dagster.language.definition import HISTORY_COLUMNS
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import Segment, keyed_rows
from strata_dagster.state.history import SnapshotRecord

_NOW, _KEPT = "__table_now", "__table_kept"


def compared_columns(
    columns: list[str], check_columns: tuple[str, ...] | None, flag: str | None
) -> list[str]:
    """The output columns whose change opens a version: the checked ones, else all but the history's."""
    if check_columns:
        return list(check_columns)
    return [name for name in columns if name not in (*HISTORY_COLUMNS, flag)]


class TableHistoryBuilder:
    """A history model over a plain table, kept by comparison with the table now (see the module).

    Args:
        ctx: the build's context; its `from` relation reads the table as versions opened at `at`.
        previous, segments: as for `DeltaBuilder`.
        at: the build's time, as the `from` relation stamps it.

    Returns (from `build`):
        DeltaBuild | Fallback: the versions of the keys that changed or left, replacing theirs; the
        live state kept when none did.
    """

    def __init__(
        self, ctx: IncrementalContext, previous: SnapshotRecord, segments: list[Segment], at: exp.Expr
    ) -> None:
        # The upsert's machinery replaces the changed keys' versions (engine.builds.incremental).
        self.delta = DeltaBuilder(ctx, previous, segments)
        self.ctx, self.previous, self.at = ctx, previous, at
        self.props = ctx.model.properties
        self.merge_keys = self.delta.merge_keys
        self.previous_query = self.delta.previous_query

    def precheck(self) -> Fallback | None:
        return self.delta.precheck()

    def window_facts(self) -> dict[str, Any] | Fallback | None:
        fallback = self.precheck()
        return fallback if fallback is not None else {"high": None}

    def build(self) -> DeltaBuild | Fallback:
        fallback = self.precheck()
        if fallback is not None:
            return fallback
        session, compiled = self.ctx.session, self.ctx.compiled
        columns = [column[0] for column in self.previous.detail.get("columns") or ()]
        compared = compared_columns(columns, self.props.check_columns, self.props.deleted_flag)
        now = compiled.bound(self.ctx.relation)
        current = (
            exp.select("*")
            .from_(self.previous_query.copy().subquery("__current"))
            .where(exp.column(IS_CURRENT))
        )

        def projected(query: exp.Query) -> exp.Select:
            return exp.select(*(exp.column(name) for name in [*self.merge_keys, *compared])).from_(
                query.copy().subquery("__projected")
            )

        # Each difference in its own subquery: EXCEPT and UNION chained bare associate left to right.
        differences = [
            exp.select("*").from_(
                exp.except_(projected(one), projected(other), distinct=True).subquery(alias)
            )
            for one, other, alias in ((now, current, "__added"), (current, now, "__removed"))
        ]
        changed = exp.union(*differences, distinct=True)
        keys_table = f"{self.ctx.table_name}__keys"
        keys = (
            exp.select(*(exp.column(key) for key in self.merge_keys))
            .from_(changed.subquery("__changed"))
            .distinct()
        )
        session.create_snapshot(keys_table, keys)
        _, rows = session.read_rows(
            exp.select(exp.func("count", exp.Star())).from_(snapshot_table(keys_table))
        )
        changed_keys = int(rows[0][0])
        detail: dict[str, Any] = {"changed_keys": changed_keys, "table_history": True}
        facts = {"high": self.previous.watermark}
        if changed_keys == 0:
            session.drop_snapshot(keys_table)
            return self.delta.writer.kept(detail, facts)
        _, removed, removed_key = self.delta.rows_replaced_by(keys_table)
        return self.delta.write_replacing(
            self._versions_of_changed(now, keys_table), removed, removed_key, keys_table, detail, facts
        )

    def _versions_of_changed(self, now: exp.Query, keys_table: str) -> exp.Query:
        """The changed keys' versions: their closed ones kept, their current one closed at the
        build's time (flagged deleted when the key left), and their rows now opened."""

        def of_changed(query: exp.Query, alias: str) -> exp.Select:
            values = [exp.column(key, table=alias) for key in self.merge_keys]
            return (
                exp.select("*")
                .from_(query.copy().subquery(alias))
                .where(keyed_rows(self.merge_keys, values, keys_table=keys_table))
            )

        kept = of_changed(self.previous_query, _KEPT)
        is_open = exp.column(IS_CURRENT, table=_KEPT)
        closing = [
            exp.If(
                this=is_open.copy(),
                true=exp.cast(self.at.copy(), "TIMESTAMP"),
                false=exp.column(VALID_TO, table=_KEPT),
            ).as_(VALID_TO),
            exp.false().as_(IS_CURRENT),
        ]
        flag = self.props.deleted_flag
        if flag is not None:
            values = [exp.column(key, table=_KEPT) for key in self.merge_keys]
            has_left = exp.not_(
                keyed_rows(
                    self.merge_keys,
                    values,
                    source=exp.select(*(exp.column(key) for key in self.merge_keys)).from_(
                        now.copy().subquery("__now_keys")
                    ),
                )
            )
            closing.append(
                exp.or_(exp.column(flag, table=_KEPT), exp.and_(is_open.copy(), has_left)).as_(flag)
            )
        closed = exp.select(exp.Star(replace=closing)).from_(kept.subquery(_KEPT))
        return exp.union(closed, of_changed(now, _NOW), distinct=False)
