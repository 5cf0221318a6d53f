"""The delta of a model whose `from` source comes with its change log (a ledger or a change feed).

The window (low, high] is the log's (engine.sources): low is the previous state's watermark, high
is read at build start. The gate is the log's: a SNAPSHOT transaction in the window, or raw rows
that appeared or left at or below `low` (a late or repeated feed event without an arrival column,
a compacted log), make the build full with the reason. An upsert replaces the keys whose events
the window brought by their rows recomputed from the whole source (a feed's current rows), so a
deleted key leaves and a re-inserted one comes back; an append adds the window's rows, and an
append_new those whose keys are new.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from strata_dagster.engine.builds.incremental import DeltaBuilder, Fallback
from strata_dagster.engine.builds.segment import DeltaBuild
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.engine.sources.feed import Feed
from strata_dagster.engine.sources.logs import (
    LOG_NEXT_COUNT,
    LOG_RELATION,
    LogFacts,
    LogSource,
    counts_at_or_below,
)
from strata_dagster.sql.render import render
from strata_dagster.sql.segments import Segment, keyed_rows, typed_literal
from strata_dagster.state.history import SnapshotRecord


class LogDeltaBuilder(DeltaBuilder):
    """A `DeltaBuilder` whose window is its `from` source's log.

    Args:
        ctx: the build's context; `ctx.log` is the source's log.
        previous, segments: as for `DeltaBuilder`.
        log: the `from` source's ledger or feed.

    Returns (from `build`):
        DeltaBuild | Fallback: as `DeltaBuilder`'s. Raises E091 when a transaction of the window
        lost its rows.
    """

    def __init__(
        self, ctx: IncrementalContext, previous: SnapshotRecord, segments: list[Segment], log: LogSource
    ) -> None:
        super().__init__(ctx, previous, segments)
        self.log = log

    def precheck(self) -> Fallback | None:
        fallback = super().precheck()
        if fallback is not None:
            return fallback
        detail = self.previous.detail
        if detail.get(LOG_RELATION) != render(self.log.table) or LOG_NEXT_COUNT not in detail:
            return Fallback(
                f"the previous build did not read `{self.log.source.name}` through its "
                f"{self.log.source.versioning.kind}"
            )
        compiled = self.ctx.compiled
        if self.props.merge_strategy == "append" and not compiled.is_base_passthrough:
            return Fallback(
                f"an append over `{self.log.source.name}` must only filter and project its rows to take the "
                "window's rows alone"
            )
        traced = [compiled.base_column(key) for key in self.merge_keys]
        if self.merge_keys and None in traced:
            untraced = self.merge_keys[traced.index(None)]
            return Fallback(
                f"merge key `{untraced}` cannot be traced to a column of `{compiled.base_relation}`"
            )
        if isinstance(self.log, Feed):
            if self.props.merge_strategy != "upsert":
                return Fallback(
                    f"`{self.log.source.name}` is a change feed, read as its keys' current rows: only an upsert "
                    "by its keys is maintained from the window"
                )
            if set(traced) != set(self.log.keys):
                return Fallback(
                    f"the merge keys are not the feed's keys ({', '.join(self.log.keys)}): a change of another "
                    "column would leave the old row"
                )
        return None

    def window_facts(self) -> dict[str, Any] | Fallback | None:
        fallback = self.precheck()
        if fallback is not None:
            return fallback
        return self._log_window()

    def _log_window(self) -> dict[str, Any] | Fallback:
        """The window's facts once the log's gate lets a delta through."""
        session, log = self.ctx.session, self.log
        high_text, high_type = log.high(session)
        if high_text is None:
            return Fallback(f"`{log.source.name}`'s log is empty")
        cdc_type = self.previous.detail.get("cdc_type") or high_type
        low = typed_literal(self.previous.watermark or "", cdc_type)
        high = typed_literal(high_text, high_type)
        reason = log.checked_window(session, low, high)
        if reason is not None:
            return Fallback(reason)
        below, up_to_high = counts_at_or_below(session, log, [low, high])
        detail = LogFacts(high_text, high_type, up_to_high).as_detail(log.table)
        recorded = int(self.previous.detail[LOG_NEXT_COUNT])
        # Rows that left a ledger's earlier transactions were rewritten (their keys come back with
        # the window) or deleted: an upsert finds the deleted keys; other strategies cannot.
        self.has_rows_left_below = below < recorded
        is_upsert_over_ledger = self.props.merge_strategy == "upsert" and not isinstance(log, Feed)
        if below > recorded or (below < recorded and not is_upsert_over_ledger):
            moved = "appeared" if below > recorded else "left the source"
            return Fallback(
                f"{abs(below - recorded)} row(s) of `{log.source.name}` {moved} at or below the watermark "
                "(an event out of order or repeated, a compacted log, or rows rewritten in place): only a "
                "full build reads them"
            )
        detail["window_rows"] = up_to_high - below
        detail["low"] = low
        detail["high_value"] = high
        return detail

    def build(self) -> DeltaBuild | Fallback:
        window = self.window_facts()
        if not isinstance(window, dict):
            return window if window is not None else Fallback("no window")
        low, high = window.pop("low"), window.pop("high_value")
        facts = {key: value for key, value in window.items() if key != "window_rows"}
        detail = self._window_detail(window)
        detail["log"] = self.log.source.versioning.kind
        if self.props.merge_strategy == "upsert":
            return self._log_upsert(low, high, facts, detail)
        return self._log_append(low, high, facts, detail)

    def _log_upsert(
        self, low: exp.Expr, high: exp.Expr, facts: dict[str, Any], detail: dict[str, Any]
    ) -> DeltaBuild:
        compiled, session = self.ctx.compiled, self.ctx.session
        bases = [compiled.base_column(key) or key for key in self.merge_keys]
        keys = [(key, exp.column(base)) for key, base in zip(self.merge_keys, bases, strict=True)]
        keys_table = f"{self.ctx.table_name}__keys"
        # Keys whose rows left the source other than into the window are found by an anti-join of
        # the previous state against the source's keys, only when rows left.
        deleted_from = self.previous_query if self.has_rows_left_below else None
        changed = session.create_keys_table(
            keys_table,
            self.log.table,
            keys,
            self.log.in_window(low, high),
            deleted_from,
            self.merge_keys,
        )
        detail.update(changed_keys=changed, deleted_keys_checked=self.has_rows_left_below)
        if changed == 0 and not self.has_rows_left_below:
            session.drop_snapshot(keys_table)
            return self.writer.kept(detail, facts)
        is_null_free, removed, removed_key = self._replaced(keys_table)
        alias = compiled.base_relation
        values = [exp.column(base, table=alias) for base in bases]
        delta_query = compiled.with_base_predicate(
            keyed_rows(self.merge_keys, values, keys_table=keys_table, is_null_free_filter=is_null_free)
        )
        kept_key_sum = self._kept_key_sum(removed, removed_key) if self.key_columns is not None else None
        return self.writer.write(
            self.ctx,
            delta_query,
            removed,
            keys_table,
            detail,
            facts,
            kept_key_sum,
            rows_left_below=self.has_rows_left_below,
        )

    def _log_append(
        self, low: exp.Expr, high: exp.Expr, facts: dict[str, Any], detail: dict[str, Any]
    ) -> DeltaBuild:
        compiled = self.ctx.compiled
        delta_query: exp.Query = compiled.with_base_predicate(
            self.log.in_window(low, high, qualifier=compiled.base_relation)
        )
        if self.props.merge_strategy == "append_new":
            delta_keys = [exp.column(key, table="__delta") for key in self.merge_keys]
            previous_keys = exp.select(*(exp.column(key) for key in self.merge_keys)).from_(
                self.previous_query.subquery("__prev")
            )
            new_only = exp.not_(keyed_rows(self.merge_keys, delta_keys, source=previous_keys))
            delta_query = exp.select("*").from_(delta_query.subquery("__delta")).where(new_only)
        return self.writer.write(self.ctx, delta_query, (0, "0"), None, detail, facts)
