"""Incremental builds for append / upsert / append_new: a delta segment on top of the previous state.

The window is (low, high]: low is the previous state's watermark (less `lateness`), high is
MAX(cdc) read at build start inside the build's transaction, so a row committed later is read by
the next build, never half. Before trusting a delta the build checks that the source still holds
what the previous build saw below the watermark (docs/architecture.md, R5); anything it cannot prove safe
falls back to a full build, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.builds.segment import (
    KEY_BOUNDS,
    KEY_SUM,
    OUTPUT_NEXT_COUNT,
    DeltaBuild,
    SegmentWriter,
    bind_relations,
)
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.engine.sources.feed import Feed
from strata_dagster.engine.sources.logs import (
    LOG_NEXT_COUNT,
    LOG_RELATION,
    LogFacts,
    LogSource,
    counts_at_or_below,
    history_relation,
    read_facts,
)
from strata_dagster.language.definition import Model
from strata_dagster.sql.content import ROW_ALIAS
from strata_dagster.sql.key_bounds import KeyBounds
from strata_dagster.sql.render import render, snapshot_table
from strata_dagster.sql.segments import (
    REREAD_ALIAS,
    Segment,
    composite_query,
    keyed_rows,
    replaced_rows,
    replaced_rows_key,
    typed_literal,
    window_predicate,
)
from strata_dagster.state.history import SnapshotRecord

FULL_SUFFIX = "__full"


@dataclass(frozen=True)
class Fallback:
    """The delta is not provably safe: build fully, and record why."""

    reason: str


def lateness_interval(model: Model) -> exp.Expr | None:
    text = model.properties.lateness
    return exp.cast(exp.Literal.string(text), "INTERVAL") if text else None


def cdc_on_raw_rows(compiled: CompiledModel, model: Model) -> exp.Expr | None:
    """The cdc column as an expression over the raw `from` rows, when it passes through unchanged."""
    name = compiled.base_column(model.properties.cdc_column or "")
    return compiled.base_expression(name) if name else None


def source_facts(
    ctx: IncrementalContext, high_lateness: exp.Expr | None, low: exp.Expr | None
) -> dict[str, Any]:
    """Window figures of the raw `from` relation, recorded for the next build to check against."""
    relation = ctx.relation(ctx.compiled.base_relation)
    cdc = cdc_on_raw_rows(ctx.compiled, ctx.model)
    facts: dict[str, Any] = {"source_relation": render(relation)}
    if cdc is None:
        return facts
    totals = ctx.source_totals.get(facts["source_relation"])
    key = tuple(render(part) if part is not None else "" for part in (relation, cdc, low, high_lateness))
    key += ctx.base_basis
    stats = ctx.window_stats_read.get(key)
    if stats is None:
        stats = ctx.session.window_stats(relation, cdc, low, high_lateness, totals, ctx.base_basis)
        ctx.window_stats_read[key] = stats
    if ctx.base_basis:
        facts["row_basis"] = list(ctx.base_basis)
    facts.update(
        high=stats.high,
        cdc_type=stats.cdc_type,
        window_rows=stats.window_rows,
        old_count=stats.old_count,
        old_hash_sum=stats.old_hash_sum,
        next_count=stats.next_count,
        next_hash_sum=stats.next_hash_sum,
    )
    return facts


def full_detail(ctx: IncrementalContext) -> dict[str, Any]:
    """Detail of a full build of an incremental model: the watermark for the first delta."""
    props = ctx.model.properties
    detail = {"strategy": props.merge_strategy, "merge_keys": list(props.merge_keys or ())}
    if ctx.log is not None:
        return {**detail, **read_facts(ctx.session, ctx.log).as_detail(ctx.log.table)}
    facts = source_facts(ctx, lateness_interval(ctx.model), None)
    detail.update(
        {
            key: value
            for key, value in facts.items()
            if key not in ("window_rows", "old_count", "old_hash_sum")
        }
    )
    return detail


def output_watermark(ctx: IncrementalContext, query: exp.Table | exp.Query) -> tuple[str | None, str]:
    """MAX(cdc_column) over a model's output, for models whose cdc column is computed."""
    return ctx.session.max_value(query, ctx.model.properties.cdc_column or "")


def next_low(high: exp.Expr, lateness: exp.Expr | None) -> exp.Expr:
    """The next build's low if this build's watermark is `high`."""
    return exp.Sub(this=high.copy(), expression=lateness.copy()) if lateness is not None else high.copy()


def full_output_facts(
    ctx: IncrementalContext, relation: exp.Table | exp.Query, high_text: str | None, cdc_type: str
) -> dict[str, Any]:
    """What a full build of an append or append_new model computed in full records for its next
    delta's window gate (nothing when its rows have no cdc value)."""
    if ctx.model.properties.merge_strategy not in ("append", "append_new") or high_text is None:
        return {}
    threshold = next_low(typed_literal(high_text, cdc_type), lateness_interval(ctx.model))
    cdc = exp.column(ctx.model.properties.cdc_column or "")
    (count,) = ctx.session.counts_at_or_below(relation, cdc, [threshold])
    return {OUTPUT_NEXT_COUNT: count}


def key_cdc_columns(model: Model, columns: Sequence[Sequence[str]]) -> list[str] | None:
    """An upsert's merge keys and cdc column, when all are output columns: what identifies a row's
    version, so the kept-rows check can hash them alone instead of whole rows."""
    props = model.properties
    if props.merge_strategy != "upsert" or not props.merge_keys or not props.cdc_column:
        return None
    wanted = [*props.merge_keys, props.cdc_column]
    names = {column[0] for column in columns}
    return wanted if all(name in names for name in wanted) else None


def full_key_sum(
    ctx: IncrementalContext,
    table_name: str,
    columns: Sequence[Sequence[str]],
    measured: tuple[tuple[int, str], KeyBounds | None] | None = None,
) -> dict[str, Any]:
    """The key-and-cdc figures a full build of an upsert records for its next delta (`measured`:
    read already with the snapshot's content, `full_key_figures`)."""
    key_columns = key_cdc_columns(ctx.model, columns)
    if key_columns is None:
        return {}
    keys = ctx.model.properties.merge_keys or ()
    if measured is None:
        measured = ctx.session.key_sum_and_bounds(snapshot_table(table_name), key_columns, keys)
    (count, hash_sum), bounds = measured
    recorded: dict[str, Any] = {KEY_SUM: [count, hash_sum]}
    if bounds is not None:
        recorded[KEY_BOUNDS] = bounds.as_detail()
    return recorded


def is_keyed_like(previous: SnapshotRecord, merge_keys: Sequence[str]) -> bool:
    """Whether the previous state's segments replace rows by these merge keys."""
    detail = previous.detail
    return tuple(detail.get("merge_keys") or ()) == tuple(merge_keys) and not detail.get("partition_grain")


def segment_writer(
    ctx: IncrementalContext, previous: SnapshotRecord, segments: list[Segment]
) -> SegmentWriter:
    """What writes a build's new segment over `previous`: with an upsert's key-and-cdc columns when
    its state records their figures, and its key bounds when its segments replace rows by its keys."""
    merge_keys = list(ctx.model.properties.merge_keys or ())
    recorded = KEY_SUM in previous.detail
    key_columns = key_cdc_columns(ctx.model, previous.detail.get("columns") or ()) if recorded else None
    state_bounds = (
        KeyBounds.from_detail(previous.detail.get(KEY_BOUNDS))
        if is_keyed_like(previous, merge_keys)
        else None
    )
    return SegmentWriter(previous, segments, merge_keys, key_columns, state_bounds)


class DeltaBuilder:
    """The delta of an `append`, `upsert` or `append_new` model: the rows of the window (low, high]
    of its cdc column, as a new segment over its live state (engine.builds.segment).

    How an upsert is built: `build` checks the live state (`precheck`) and the window gate (rows
    that appeared at or below the watermark make it full), writes the window's keys to a keys
    table, proves that the rows it keeps are what the model gives now outside the window
    (`_kept_rows_match`), then writes the window's rows as a segment that replaces the previous
    rows with those keys (`_upsert`). An append reads the window (pushed down to the source when
    its cdc column passes through unchanged, else taken from the model computed in full) and adds
    it (`_append`); `append_new` keeps only the window's rows whose keys are new.

    Args:
        ctx: the build's context (engine.decisions.scope.RunScope.incremental_context).
        previous: the live state the delta goes over.
        segments: the live state's segments.

    Returns (from `build`):
        DeltaBuild | Fallback: the new state, or the live state kept when no row changed; a
        Fallback says why the model is built in full instead (nothing is left written).
    """

    def __init__(self, ctx: IncrementalContext, previous: SnapshotRecord, segments: list[Segment]) -> None:
        self.ctx = ctx
        self.previous = previous
        self.segments = segments
        self.props = ctx.model.properties
        self.merge_keys = list(self.props.merge_keys or ())
        # Writes the delta's rows as the new state's segment (engine.builds.segment).
        self.writer = segment_writer(ctx, previous, segments)
        self.key_columns = self.writer.key_columns
        # Rows left the region at or below `low` since the previous state counted it: that count
        # no longer describes the source, so this build records a new state even if no row changes.
        self.has_rows_left_below = False
        self.previous_query = composite_query(
            segments,
            self.previous.detail.get("merge_keys") or (),
            self.previous.detail.get("partition_grain"),
        )
        self.state_bounds = self.writer.state_bounds

    def _gate(self, count: int, expected_count: int | None) -> Fallback | None:
        """The window gate (docs/architecture.md, R5), for every merge strategy: the region at or
        below `low` was consumed by earlier builds (the previous build counted `expected_count` rows
        there), so a row that appeared there (a writer committing later than `lateness`, a reload)
        is in no window; only a full build is sure to see it. No recorded count: nothing proves the
        region unchanged."""
        if expected_count is None:
            return Fallback("the previous build recorded no count of the rows at or below its watermark")
        if count > expected_count:
            return Fallback(
                f"{count - expected_count} row(s) appeared at or below the watermark "
                "(written late beyond `lateness`, or the source was reloaded)"
            )
        self.has_rows_left_below = count < expected_count
        return None

    def precheck(self) -> Fallback | None:
        """What rules a delta out from the previous state and the model alone, before any row is read."""
        previous = self.previous
        detail = previous.detail
        if previous.model_fingerprint != self.ctx.fingerprint:
            return Fallback("the model's code changed since its last build")
        if detail.get("strategy") != self.props.merge_strategy:
            return Fallback("the previous state was built with another merge strategy")
        if previous.watermark is None:
            return Fallback("the previous build saw no cdc value (empty input)")
        if self.ctx.compiled.has_window:
            return Fallback("a window function over the delta alone would not see the rows it must")
        relation = self.ctx.relation(self.ctx.compiled.base_relation)
        if isinstance(relation, exp.Table) and detail.get("source_relation") != render(relation):
            return Fallback(
                f"`{self.ctx.compiled.base_relation}` is read from another relation than last time"
            )
        if "next_count" in detail and detail.get("row_basis", []) != list(self.ctx.base_basis):
            return Fallback(
                f"`{self.ctx.compiled.base_relation}` changed its `versioning`: its figures from the last build "
                "cannot be compared"
            )
        return None

    def _bounds(self) -> tuple[exp.Expr, exp.Expr, exp.Expr | None]:
        """The previous watermark, the window's low (less `lateness`), and the lateness."""
        assert self.previous.watermark is not None
        cdc_type = self.previous.detail.get("cdc_type") or "VARCHAR"
        watermark = typed_literal(self.previous.watermark, cdc_type)
        lateness = lateness_interval(self.ctx.model)
        low = exp.Sub(this=watermark, expression=lateness.copy()) if lateness is not None else watermark
        return watermark, low, lateness

    def build(self) -> DeltaBuild | Fallback:
        """Write the window's rows as the new state's segment (see the class)."""
        fallback = self.precheck()
        if fallback is not None:
            return fallback
        relation = self.ctx.relation(self.ctx.compiled.base_relation)
        watermark, low, lateness = self._bounds()
        raw_cdc = cdc_on_raw_rows(self.ctx.compiled, self.ctx.model)
        if self.props.merge_strategy == "upsert":
            return self._upsert(relation, raw_cdc, low, lateness)
        return self._append(relation, raw_cdc, low, watermark, lateness)

    def window_facts(self) -> dict[str, Any] | Fallback | None:
        """The figures of the window the delta would read, or why the build falls back to full,
        from the checks the build makes before writing anything; None when only the build can
        tell (an append computed in full before its window is taken)."""
        fallback = self.precheck()
        if fallback is not None:
            return fallback
        _, low, lateness = self._bounds()
        raw_cdc = cdc_on_raw_rows(self.ctx.compiled, self.ctx.model)
        if self.props.merge_strategy == "upsert":
            untraced = self._untraced(raw_cdc)
            return untraced if untraced is not None else self._source_window(low, lateness)
        if raw_cdc is not None and self.ctx.compiled.is_base_passthrough:
            return self._source_window(low, lateness)
        return None

    def _untraced(self, raw_cdc: exp.Expr | None) -> Fallback | None:
        compiled = self.ctx.compiled
        if raw_cdc is None:
            return Fallback(
                f"cdc_column `{self.props.cdc_column}` is not a column of `{compiled.base_relation}` passed through "
                "unchanged (computed after a join, aggregate, set operation or expand)"
            )
        untraced = [key for key in self.merge_keys if compiled.base_column(key) is None]
        if untraced:
            return Fallback(
                f"merge key `{untraced[0]}` cannot be traced to a column of `{compiled.base_relation}`"
            )
        return None

    def _source_window(self, low: exp.Expr, lateness: exp.Expr | None) -> dict[str, Any] | Fallback:
        """The source's window figures, once the window gate lets the delta through."""
        facts = source_facts(self.ctx, lateness, low)
        if facts["high"] is None:
            return Fallback("the source has no cdc value")
        late = self._gate(facts["old_count"], self.previous.detail.get("next_count"))
        return late if late is not None else facts

    # -- upsert -------------------------------------------------------------------------------
    def _upsert(
        self,
        relation: exp.Table | exp.Query,
        raw_cdc: exp.Expr | None,
        low: exp.Expr,
        lateness: exp.Expr | None,
    ) -> DeltaBuild | Fallback:
        compiled = self.ctx.compiled
        untraced = self._untraced(raw_cdc)
        if untraced is not None:
            return untraced
        assert raw_cdc is not None
        key_sources = [(key, compiled.base_column(key)) for key in self.merge_keys]
        facts = self._source_window(low, lateness)
        if isinstance(facts, Fallback):
            return facts
        rows_left = self.has_rows_left_below
        notes = self._edits_below(facts)
        high = typed_literal(facts["high"], facts["cdc_type"])
        keys = [(key, compiled.base_expression(base or key)) for key, base in key_sources]
        window = window_predicate(raw_cdc, low, high)
        keys_table = f"{self.ctx.table_name}__keys"
        session = self.ctx.session
        alias = compiled.base_relation
        values = [compiled.base_expression(base or key, qualifier=alias) for key, base in key_sources]
        # Under `lateness` the band (low, watermark] is read again: a live row in it whose source row
        # was deleted is in no window, so the keys of the live rows there are replaced too (a row
        # still in the source comes back with the window's rows).
        reread = (
            (
                self.previous_query,
                exp.GT(
                    this=exp.column(self.props.cdc_column or "", table=REREAD_ALIAS), expression=low.copy()
                ),
            )
            if lateness is not None
            else None
        )
        changed_keys = session.create_keys_table(
            keys_table, relation, keys, window, None, self.merge_keys, reread
        )
        nothing: tuple[bool, tuple[int, str], str] = (True, (0, "0"), "0")
        is_null_free, removed, removed_key = (
            self.rows_replaced_by(keys_table) if changed_keys or rows_left else nothing
        )
        is_anti_joined = False
        if rows_left and not self._kept_rows_match(
            keys_table, values, low, high, removed, removed_key, is_null_free
        ):
            # Rows left the source other than by an update in the window: find the keys that left.
            is_anti_joined = True
            window_keys = changed_keys
            session.forget_held(self._replaced_rows_key(keys_table))  # the keys table is made again
            changed_keys = session.create_keys_table(
                keys_table, relation, keys, window, self.previous_query, self.merge_keys, reread
            )
            is_null_free, removed, removed_key = self.rows_replaced_by(keys_table)
            if changed_keys == window_keys:
                notes.append(
                    "rows the model keeps changed in the source without advancing cdc_column, and no key "
                    "left it; by the cdc contract they are not applied (run `strata verify` or a full build)"
                )
        detail = self._window_detail(facts)
        detail.update(
            changed_keys=changed_keys,
            kept_rows_checked=rows_left,
            deleted_keys_checked=is_anti_joined,
            notes=notes,
        )
        if changed_keys == 0 and not rows_left:
            session.drop_snapshot(keys_table)
            return DeltaBuild(self.previous, True, detail)
        delta_query = compiled.with_base_predicate(
            keyed_rows(
                self.merge_keys,
                values,
                keys_table=keys_table,
                is_null_free_filter=is_null_free,
                key_range=session.key_range(keys_table, self.merge_keys) if is_null_free else None,
            )
        )
        return self.write_replacing(delta_query, removed, removed_key, keys_table, detail, facts)

    def write_replacing(
        self,
        delta_query: exp.Query,
        removed: tuple[int, str],
        removed_key: str,
        keys_table: str,
        detail: dict[str, Any],
        facts: dict[str, Any],
        ctx: IncrementalContext | None = None,
    ) -> DeltaBuild:
        """The new segment of `delta_query`'s rows over the live state, replacing the keys in
        `keys_table` (their `removed` figures), with the kept rows' key sum where it is tracked
        (`ctx`: what the segment's relations are read from, when not the build's)."""
        kept_key_sum = self._kept_key_sum(removed, removed_key) if self.key_columns is not None else None
        return self.writer.write(
            ctx or self.ctx,
            delta_query,
            removed,
            keys_table,
            detail,
            facts,
            kept_key_sum,
            rows_left_below=self.has_rows_left_below,
        )

    def _edits_below(self, facts: dict[str, Any]) -> list[str]:
        """A note when the rows at or below `low` are as many as before but hash differently (a
        source versioned by whole rows): edited in place, which the cdc contract excludes."""
        hashes = (facts.get("old_hash_sum"), self.previous.detail.get("next_hash_sum"))
        if self.has_rows_left_below or None in hashes or hashes[0] == hashes[1]:
            return []
        return [
            "rows at or below the watermark changed without advancing cdc_column; by the cdc contract they "
            "are not applied (run `strata verify` or a full build to pick them up)"
        ]

    def rows_replaced_by(self, keys_table: str) -> tuple[bool, tuple[int, str], str]:
        """Whether the keys table is NULL-free, and the previous rows its keys replace: their count
        and row-hash sum, and their key-and-cdc hash sum ("0" when the state records none). The
        rows are held for the session: the models following this one read them again
        (engine.builds.model_slices), and only a scan of the whole previous state finds them."""
        session = self.ctx.session
        is_null_free = session.count_null_keys(keys_table, self.merge_keys) == 0
        if is_null_free and self._is_beyond_state(keys_table):
            return is_null_free, (0, "0"), "0"
        if self._is_keyed_like_now():
            held = session.held_rows(
                self._replaced_rows_key(keys_table),
                lambda: replaced_rows(
                    self.segments,
                    self.merge_keys,
                    None,
                    [keys_table],
                    is_null_free=is_null_free,
                    key_range=session.key_range(keys_table, self.merge_keys) if is_null_free else None,
                ),
            )
            relation: exp.Table | exp.Query = held
            condition: exp.Expr = exp.true()
        else:
            relation = self.previous_query
            previous_keys = [exp.column(key, table=ROW_ALIAS) for key in self.merge_keys]
            condition = keyed_rows(
                self.merge_keys, previous_keys, keys_table=keys_table, is_null_free_filter=is_null_free
            )
        if self.key_columns is None:
            return is_null_free, session.content_where(relation, condition), "0"
        query = relation if isinstance(relation, exp.Query) else exp.select("*").from_(relation)
        count, hash_sum, key_hash_sum = session.content_and_key_sum_where(query, condition, self.key_columns)
        return is_null_free, (count, hash_sum), key_hash_sum

    def _is_beyond_state(self, keys_table: str) -> bool:
        """Whether every key of `keys_table` lies outside the keys the previous state can hold, so
        that it replaces none of its rows (known without reading the state)."""
        bounds = self.ctx.session.key_bounds(keys_table, self.merge_keys)
        return (
            self.state_bounds is not None and bounds is not None and self.state_bounds.is_apart_from(bounds)
        )

    def _is_keyed_like_now(self) -> bool:
        """Whether the previous state's segments replace rows by this build's merge keys."""
        return is_keyed_like(self.previous, self.merge_keys)

    def _replaced_rows_key(self, keys_table: str) -> tuple[object, ...]:
        return replaced_rows_key(self.segments, self.merge_keys, None, [keys_table])

    def _kept_key_sum(self, removed: tuple[int, str], removed_key: str) -> tuple[int, int]:
        """The key-and-cdc figures of the previous rows the delta keeps."""
        count, hash_sum = self.previous.detail[KEY_SUM]
        return int(count) - removed[0], int(hash_sum) - int(removed_key)

    def _kept_rows_match(
        self,
        keys_table: str,
        values: list[exp.Expr],
        low: exp.Expr,
        high: exp.Expr,
        removed: tuple[int, str],
        removed_key: str,
        is_null_free: bool,
    ) -> bool:
        """Whether the previous rows the delta keeps (keys not in the window) are exactly what the
        model gives now from the source rows outside the window with those keys.

        Rows left the region below the watermark: updated (their keys are in the window) or deleted.
        A deleted row the previous state holds makes the two sides differ, so a match proves no
        kept row lost its source row, and the costly deleted-key anti-join is not needed. When the
        state records its keys-and-cdc figures, rows are compared by those columns alone (a row's
        version), which spares computing and hashing every output column."""
        compiled = self.ctx.compiled
        cdc = compiled.base_expression(
            compiled.base_column(self.props.cdc_column or "") or "", qualifier=compiled.base_relation
        )
        outside = exp.not_(exp.func("coalesce", window_predicate(cdc, low, high), exp.false()))
        session = self.ctx.session
        if session.prefers_anti_join:
            # One scan of the rows outside the window whose keys the window does not replace
            # (NOT of the NULL-safe semi-join, never NULL): the figures the two scans below subtract.
            kept = exp.and_(outside, exp.not_(keyed_rows(self.merge_keys, values, keys_table=keys_table)))
            conditions = [kept]
        else:
            # All rows outside the window less those whose keys the window replaces: two scans that
            # keep DuckDB's plain semi-join, cheaper than one scan under a NULL-safe anti-join.
            replaced = keyed_rows(
                self.merge_keys, values, keys_table=keys_table, is_null_free_filter=is_null_free
            )
            conditions = [outside, exp.and_(outside.copy(), replaced)]
        queries = [
            bind_relations(compiled.with_base_predicate(condition), self.ctx.relation)
            for condition in conditions
        ]
        if self.key_columns is not None:
            key_columns = self.key_columns
            figures = [session.key_sum(query, key_columns) for query in queries]
            before = self._kept_key_sum(removed, removed_key)
        else:
            figures = [session.content_where(query) for query in queries]
            before = (self.previous.row_count - removed[0], int(self.previous.row_hash_sum) - int(removed[1]))
        (all_count, all_sum), (replaced_count, replaced_sum) = (
            (figures[0], (0, "0")) if len(figures) == 1 else figures
        )
        return (all_count - replaced_count, int(all_sum) - int(replaced_sum)) == before

    # -- append / append_new ------------------------------------------------------------------
    def _append(
        self,
        relation: exp.Table | exp.Query,
        raw_cdc: exp.Expr | None,
        low: exp.Expr,
        watermark: exp.Expr,
        lateness: exp.Expr | None,
    ) -> DeltaBuild | Fallback:
        compiled = self.ctx.compiled
        is_pushdown = raw_cdc is not None and compiled.is_base_passthrough
        if is_pushdown:
            window = self._source_window(low, lateness)
            if isinstance(window, Fallback):
                return window
            facts = window
            high = typed_literal(facts["high"], facts["cdc_type"])
            base_cdc = compiled.base_column(self.props.cdc_column or "") or ""
            predicate = window_predicate(
                compiled.base_expression(base_cdc, qualifier=compiled.base_relation), low, high
            )
            delta_query: exp.Query = compiled.with_base_predicate(predicate)
        else:
            # Recompute, then keep the window: correct for any pipeline, slower.
            full = compiled.statement.copy()
            output = self.ctx.compiled.bound(self.ctx.relation)
            high_text, cdc_type = output_watermark(self.ctx, output)
            if high_text is None:
                return Fallback("the model has no cdc value")
            high = typed_literal(high_text, cdc_type)
            # The gate on the model's own rows: the source rows behind them are not traceable.
            old_count, next_count = self.ctx.session.counts_at_or_below(
                output, exp.column(self.props.cdc_column or ""), [low, next_low(high, lateness)]
            )
            late = self._gate(old_count, self.previous.detail.get(OUTPUT_NEXT_COUNT))
            if late is not None:
                return late
            facts = {
                "source_relation": render(relation),
                "high": high_text,
                "cdc_type": cdc_type,
                OUTPUT_NEXT_COUNT: next_count,
            }
            predicate = window_predicate(
                exp.column(self.props.cdc_column or "", table=FULL_SUFFIX), low, high
            )
            delta_query = exp.select("*").from_(full.subquery(FULL_SUFFIX)).where(predicate)
        detail = self._window_detail(facts)
        detail.update(pushdown=is_pushdown, notes=self._edits_below(facts))
        if self.props.merge_strategy == "append_new":
            delta_keys = [exp.column(key, table="__delta") for key in self.merge_keys]
            # Only the previous rows with a key of the window can match: found by a semi-join whose
            # hash side is the window's few keys, not a hash of every previous key.
            window_keys = exp.select(*(exp.column(key) for key in self.merge_keys)).from_(
                delta_query.copy().subquery("__window")
            )
            previous_keys = [exp.column(key, table="__prev") for key in self.merge_keys]
            candidates = (
                exp.select("*")
                .from_(self.previous_query.subquery("__prev"))
                .where(keyed_rows(self.merge_keys, previous_keys, source=window_keys))
            )
            new_only = exp.not_(keyed_rows(self.merge_keys, delta_keys, source=candidates))
            delta_query = exp.select("*").from_(delta_query.subquery("__delta")).where(new_only)
        elif lateness is not None:
            # Rows re-read because of lateness were appended last time: append each once.
            cdc = exp.column(self.props.cdc_column or "")
            overlap = (
                exp.select("*")
                .from_(self.previous_query.subquery("__prev"))
                .where(
                    exp.and_(
                        exp.GT(this=cdc.copy(), expression=low.copy()),
                        exp.LTE(this=cdc, expression=watermark.copy()),
                    )
                )
            )
            delta_query = exp.except_(
                exp.select("*").from_(delta_query.subquery("__delta")), overlap, distinct=False
            )
        return self.writer.write(
            self.ctx, delta_query, (0, "0"), None, detail, facts, rows_left_below=self.has_rows_left_below
        )

    # -- shared -------------------------------------------------------------------------------
    def _window_detail(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            "window": {
                "low": self.previous.watermark,
                "high": facts.get("high"),
                "lateness": self.props.lateness,
            },
            "rows_read": facts.get("window_rows"),
        }


# The delta of a model whose `from` source comes with its change log (a ledger or a change feed).
#
# The window (low, high] is the log's (engine.sources): low is the previous state's watermark, high
# is read at build start. The gate is the log's: a SNAPSHOT transaction in the window, or raw rows
# that appeared or left at or below `low` (a late or repeated feed event without an arrival column,
# a compacted log), make the build full with the reason. An upsert replaces the keys whose events
# the window brought by their rows recomputed from the whole source (a feed's current rows), so a
# deleted key leaves and a re-inserted one comes back; an append adds the window's rows, and an
# append_new those whose keys are new. A history over a feed replaces its keys' versions alike.
# An upsert's keys and a history's are replaced alike: every row (version) of a key the window
# touched is removed and the key's rows recomputed from its whole feed come back.
KEYS_REPLACED = ("upsert", "history")


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
            if self.props.merge_strategy not in KEYS_REPLACED:
                return Fallback(
                    f"`{self.log.source.name}` is a change feed, read as its keys' current rows: only an upsert "
                    "or a history by its keys is maintained from the window"
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
        if self.props.merge_strategy in KEYS_REPLACED:
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
        is_null_free, removed, removed_key = self.rows_replaced_by(keys_table)
        alias = compiled.base_relation
        values = [exp.column(base, table=alias) for base in bases]
        delta_query = compiled.with_base_predicate(
            keyed_rows(self.merge_keys, values, keys_table=keys_table, is_null_free_filter=is_null_free)
        )
        ctx = self.ctx
        if self.props.merge_strategy == "history":
            # The changed keys' versions from their events alone: the predicate on the versions
            # would wait behind window functions over every event of the log.
            def changed_keys(qualifier: str) -> exp.Expr:
                values = [exp.column(base, table=qualifier) for base in bases]
                return keyed_rows(
                    self.merge_keys, values, keys_table=keys_table, is_null_free_filter=is_null_free
                )

            versions = history_relation(ctx.model, tuple(bases), self.log, changed_keys)
            ctx = replace(ctx, relation=lambda name: versions if name == alias else self.ctx.relation(name))
        return self.write_replacing(delta_query, removed, removed_key, keys_table, detail, facts, ctx)

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
