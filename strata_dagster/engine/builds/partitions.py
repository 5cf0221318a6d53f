"""Partition-complete builds for models with `partitioned_by` (docs/architecture.md, R6).

Affected partitions are found from what changed in the raw `from` input: its rows are grouped by
the partition of the model's partition column traced back to them (before any filter), and each
group's row-hash fingerprint is compared with the one recorded by the previous build. Every
affected partition is recomputed completely, from all of its input rows, into a new immutable
segment that replaces those partitions (and only those) in the model's view. A month model over
daily rows recomputes whole months. Anything that makes a partition depend on rows of other
partitions (window functions, set operations) or on another input that changed rebuilds fully.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from sqlglot import exp

from strata_dagster.backends.base import WarehouseError
from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.builds import state_figures
from strata_dagster.engine.builds.row_wise import ROW_WISE
from strata_dagster.language.definition import Model
from strata_dagster.sql.content import ROW_ALIAS, Content
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import (
    KEY_GRAINS,
    MAX_EXACT_RANGES,
    MAX_SKIPPING_RANGES,
    RANGE_TYPES,
    PartitionRanges,
    Segment,
    TypedTexts,
    block_spans,
    composite_query,
    keyed_rows,
    partition_key,
    partition_ranges,
    partition_runs,
    replaced_rows,
    replaced_rows_key,
)
from strata_dagster.state.history import SnapshotRecord

if TYPE_CHECKING:
    # Imported where a build uses them: a run's decisions read this module's analysis alone.
    from strata_dagster.engine.builds import joined_inputs
    from strata_dagster.engine.builds.incremental import Fallback
    from strata_dagster.engine.builds.segment import DeltaBuild
    from strata_dagster.engine.builds.strategy import IncrementalContext

STRATEGY = "partitions"
NULL_PARTITION = state_figures.NULL_KEY
# Past MAX_EXACT_RANGES runs, ranges are used where the files' statistics say a read of them skips
# at least half of the rows.
MAX_SHARE_READ = 0.5
# Recomputed partitions that came back equal leave the new segment (a second write of it) only
# when they hold at least this share of its rows. Below it the rewrite costs more than keeping
# them: their rows leave and come back equal, which changes nothing a follower computes. At 10M
# orders, 0.1% updated reached 10,000 key blocks, 150 of them equal: the rewrite took 80 ms of 0.9 s.
MIN_EQUAL_SHARE = 0.25
# Detail key: input model -> the segment ids a state was built from (engine.builds.model_slices).
UPSTREAM_SEGMENTS = "upstream_segments"


def partition_column(ctx: IncrementalContext | Model) -> str:
    model = ctx if isinstance(ctx, Model) else ctx.model
    spec = model.properties.partitioned_by
    assert spec is not None
    return spec.column


def partition_grain(ctx: IncrementalContext | Model) -> str:
    model = ctx if isinstance(ctx, Model) else ctx.model
    spec = model.properties.partitioned_by
    assert spec is not None
    return spec.grain


def locality_problem_of(model: Model, compiled: CompiledModel) -> str | None:
    """Why partitions of this model cannot be rebuilt one by one, if they cannot."""
    if compiled.has_window:
        return "a window function can read rows of other partitions"
    if compiled.has_set_operation:
        return "a set operation brings rows the partition column does not trace to `from`"
    if compiled.traced_column(partition_column(model)) is None:
        return (
            f"partition column `{partition_column(model)}` is not carried unchanged from `{compiled.base_relation}` "
            "(a plain column or let, through joins and group keys)"
        )
    return None


def locality_problem(ctx: IncrementalContext) -> str | None:
    return locality_problem_of(ctx.model, ctx.compiled)


def raw_partition_of(model: Model, compiled: CompiledModel, qualifier: str | None = None) -> exp.Expr:
    """The partition of a raw `from` row, by the model's grain."""
    base = compiled.traced_column(partition_column(model))
    assert base is not None
    return partition_key(compiled.base_expression(base, qualifier=qualifier), partition_grain(model))


def raw_partition(ctx: IncrementalContext, qualifier: str | None = None) -> exp.Expr:
    return raw_partition_of(ctx.model, ctx.compiled, qualifier)


def partition_fingerprints(ctx: IncrementalContext) -> dict[str, list[Any]]:
    """Row count and row-hash sum of the raw `from` input, per partition (before any filter);
    taken from the run's source scan when it grouped the source by this partition already."""
    groups = ctx.partition_groups
    if groups is None:
        groups = ctx.session.content_by_group(
            ctx.relation(ctx.compiled.base_relation), raw_partition(ctx), ctx.base_basis
        )
    return {
        NULL_PARTITION if key is None else key: [count, hash_sum] for key, (count, hash_sum) in groups.items()
    }


def other_inputs(ctx: IncrementalContext, identities: dict[str, str]) -> dict[str, str]:
    return {name: identity for name, identity in identities.items() if name != ctx.compiled.base_relation}


def full_detail(ctx: IncrementalContext, identities: dict[str, str]) -> dict[str, Any]:
    """What a full build of a partitioned model records for its next, partition-complete build."""
    from strata_dagster.engine.builds import joined_inputs, key_bucket_figures

    detail: dict[str, Any] = {
        "strategy": STRATEGY,
        "merge_keys": [partition_column(ctx)],
        "partition_grain": partition_grain(ctx),
        "other_inputs": other_inputs(ctx, identities),
    }
    if locality_problem(ctx) is None and partition_grain(ctx) in KEY_GRAINS:
        # Too many buckets to list in history: their figures go to a table (engine.builds.key_buckets).
        detail[key_bucket_figures.BUCKET_FIGURES] = key_bucket_figures.record(ctx, raw_partition(ctx))
        detail[joined_inputs.FIGURES] = joined_inputs.record_figures(ctx)
    elif locality_problem(ctx) is None:
        detail["partition_fingerprints"] = partition_fingerprints(ctx)
        detail[joined_inputs.FIGURES] = joined_inputs.record_figures(ctx)
    return detail


def measure_figures(
    ctx: IncrementalContext, relation: exp.Table, followers: Mapping[str, exp.Expr] | None = None
) -> state_figures.SliceFigures | None:
    """The figures a state of a day- or month-partitioned model records of `relation`'s rows, by
    its partitions and the slices of `followers` (default: its followers in this run)."""
    own = partition_key(exp.column(partition_column(ctx), table=ROW_ALIAS), partition_grain(ctx))
    return state_figures.measure(
        ctx.session, relation, own, ctx.follower_slices if followers is None else followers
    )


def _as_text(figures: dict[str, tuple[int, int]]) -> dict[str, tuple[int, str]]:
    return {key: (count, str(hash_sum)) for key, (count, hash_sum) in figures.items()}


def _with_figures(
    build: DeltaBuild,
    previous: state_figures.SliceFigures | None,
    affected: list[str],
    segment: state_figures.SliceFigures | None,
) -> DeltaBuild:
    """The build, its state recording its figures: the previous state's, the affected partitions
    as the new segment holds them (equal ones are equal there too). None known: none recorded."""
    from strata_dagster.engine.builds.segment import DeltaBuild

    if previous is None or segment is None or build.is_unchanged:
        return build
    figures = previous.with_partitions(affected, segment)
    if not figures.adds_up_to(build.record):
        return build
    detail = {**build.record.detail, state_figures.FIGURES: figures.as_detail()}
    return DeltaBuild(replace(build.record, detail=detail), False, build.detail)


def _replacing_keys_table(record: SnapshotRecord) -> str | None:
    """The keys table by which a new state's delta segment replaces rows of the earlier ones."""
    detail = record.detail
    return detail.get("compacted_delta_keys") if detail.get("compacted") else detail.get("keys_table")


class ChangeFinder(Protocol):
    """Which partitions a `PartitionBuild` recomputes, and what its new state records to find
    them on the next build. Implemented by `ByPartitionFingerprints` (here), `ByUpstreamSegments`
    (engine.builds.model_slices) and `ByRequest` (engine.builds.partition_range)."""

    @property
    def follows_segments(self) -> bool:
        """Whether the partitions are found from the input models' new segments (slices)."""
        ...

    @property
    def completes_state(self) -> bool:
        """Whether the new state is what the inputs give (False: only some partitions are
        rebuilt, no build key names it, and rows equal to the live ones keep the live state)."""
        ...

    def precheck(self, build: PartitionBuild) -> Fallback | None:
        """Why no partition build is possible on the live state, before any row is read."""
        ...

    def joined_change(
        self, build: PartitionBuild, changed_inputs: list[str]
    ) -> joined_inputs.JoinedChange | Fallback:
        """The partitions the changed joined inputs reach, or why the model is built in full."""
        ...

    def changed_partitions(self, build: PartitionBuild) -> list[str]:
        """The partitions the changes reach (read, never written): what `plan` names."""
        ...

    def changed_slices(
        self, build: PartitionBuild, joined: joined_inputs.JoinedChange
    ) -> tuple[list[str], dict[str, Any], int | None]:
        """The partitions to recompute, the facts the new state records, and how many there are."""
        ...


class PartitionRows(Protocol):
    """The new rows of the affected partitions: `Recomputed` from the input (here), or kept from
    the input's delta (engine.builds.aggregate_builder.AggregateMaintained)."""

    def rows(
        self, build: PartitionBuild, affected: list[str], keys_table: str, detail: dict[str, Any]
    ) -> exp.Query:
        """The rows of the partitions `affected` (named by `keys_table`); may add to `detail`."""
        ...

    def release(self, build: PartitionBuild) -> None:
        """Drop what `rows` held for the build, once it is over."""
        ...


class Recomputed:
    """A `PartitionBuild`'s rows: each affected partition recomputed completely from its input
    rows (the model's query over the `from` rows of those partitions only).

    Returns (from `rows`):
        exp.Query: the model's query with a predicate selecting the affected partitions' input
        rows (by ranges of the raw column when exact, else by the keys table).
    """

    def rows(
        self, build: PartitionBuild, affected: list[str], keys_table: str, detail: dict[str, Any]
    ) -> exp.Query:
        return build.ctx.compiled.with_base_predicate(build.input_rows_of(affected, keys_table))

    def release(self, build: PartitionBuild) -> None:
        return None


class ByPartitionFingerprints:
    """A `PartitionBuild`'s change finder for a `partitioned_by` model: the partitions whose raw
    `from` rows changed since the last build (their row-hash fingerprints differ from those the
    live state recorded), and those the changed joined inputs reach.

    Returns (from `changed_slices`):
        tuple: the partitions to recompute, the facts the new state records (the fingerprints
        now, the other inputs' identities, the joined inputs' figures), and how many partitions
        the input has now.
    """

    follows_segments = False
    completes_state = True

    def precheck(self, build: PartitionBuild) -> Fallback | None:
        return fingerprint_precheck(build)

    def joined_change(
        self, build: PartitionBuild, changed_inputs: list[str]
    ) -> joined_inputs.JoinedChange | Fallback:
        return joined_change(build, changed_inputs)

    def changed_partitions(self, build: PartitionBuild) -> list[str]:
        return sorted(
            changed_fingerprints(
                partition_fingerprints(build.ctx), build.previous.detail["partition_fingerprints"]
            )
        )

    def changed_slices(
        self, build: PartitionBuild, joined: joined_inputs.JoinedChange
    ) -> tuple[list[str], dict[str, Any], int | None]:
        return fingerprint_slices(build, joined, changed_fingerprints, lambda now, before: now)


def fingerprint_precheck(build: PartitionBuild) -> Fallback | None:
    """What rules a partition build by fingerprints out, from the live state and the model alone."""
    from strata_dagster.engine.builds.incremental import Fallback

    previous = build.previous.detail
    if build.previous.model_fingerprint != build.ctx.fingerprint:
        return Fallback("the model's code changed since its last build")
    if previous.get("strategy") != STRATEGY or previous.get("partition_grain") != partition_grain(build.ctx):
        return Fallback("the previous state was not built by partitions of this grain")
    problem = locality_problem(build.ctx)
    if problem is not None:
        return Fallback(problem)
    if "partition_fingerprints" not in previous:
        return Fallback("the previous build recorded no partition fingerprints")
    return None


def joined_change(build: PartitionBuild, changed_inputs: list[str]) -> joined_inputs.JoinedChange | Fallback:
    """The partitions the changed joined inputs reach (none when none changed)."""
    from strata_dagster.engine.builds import joined_inputs

    recorded = build.previous.detail.get(joined_inputs.FIGURES, {})
    if not changed_inputs:
        return joined_inputs.JoinedChange(set(), recorded)
    return joined_inputs.partitions_reached(
        build.ctx, changed_inputs, recorded, lambda qualifier: raw_partition(build.ctx, qualifier)
    )


def changed_fingerprints(now: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """The partitions to recompute: those whose input rows changed since the last build."""
    return sorted(key for key in set(now) | set(before) if now.get(key) != before.get(key))


def fingerprint_slices(
    build: PartitionBuild,
    joined: joined_inputs.JoinedChange,
    affected: Callable[[dict[str, Any], dict[str, Any]], list[str]],
    recorded: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
) -> tuple[list[str], dict[str, Any], int | None]:
    """The partitions to recompute (`affected` of the fingerprints now and before, and those the
    changed joined inputs reach), the facts the new state records (its fingerprints: `recorded`),
    and how many partitions there are."""
    from strata_dagster.engine.builds import joined_inputs

    now = partition_fingerprints(build.ctx)
    before = build.previous.detail.get("partition_fingerprints") or {}
    reached_keys = joined.reached
    keys = sorted(set(affected(now, before)) | reached_keys)
    facts = {
        "partition_fingerprints": recorded(now, before),
        "other_inputs": other_inputs(build.ctx, build.identities),
        joined_inputs.FIGURES: joined.figures,
    }
    if build.upstream_segments is not None:
        facts[UPSTREAM_SEGMENTS] = build.upstream_segments
    return keys, facts, len(now)


class PartitionBuild:
    """A partition-complete build: the affected partitions recomputed into one new segment that
    replaces them (and only them) in the model's state.

    Args:
        ctx: the build's context.
        previous: the live state; segments: its segments.
        identities: each input's content identity in this run.
        changes: which partitions are affected (`ByPartitionFingerprints` by default).
        rows: how their new rows are found (`Recomputed` by default).
        upstream_segments: the followed input models' segment ids, recorded for the next build of
            a model compared by fingerprints while it follows them (engine.builds.model_slices).

    Returns (from `build`):
        DeltaBuild: the new state (equal partitions keep their live segment), or the live state
        kept; a Fallback says why the model is built in full instead.
    """

    def __init__(
        self,
        ctx: IncrementalContext,
        previous: SnapshotRecord,
        segments: list[Segment],
        identities: dict[str, str],
        changes: ChangeFinder | None = None,
        rows: PartitionRows | None = None,
        upstream_segments: dict[str, list[str]] | None = None,
    ) -> None:
        from strata_dagster.engine.builds.incremental import segment_writer

        self.ctx = ctx
        self.previous = previous
        self.segments = segments
        self.identities = identities
        self.changes: ChangeFinder = changes if changes is not None else ByPartitionFingerprints()
        self.rows: PartitionRows = rows if rows is not None else Recomputed()
        self.upstream_segments = upstream_segments
        self.previous_query = composite_query(
            segments, previous.detail.get("merge_keys") or (), previous.detail.get("partition_grain")
        )
        self._measured: tuple[str, state_figures.SliceFigures] | None = None  # segment, its figures
        # The new segment's figures per partition are measured in the scan that counts its rows.
        self.writer = replace(segment_writer(ctx, previous, segments), measure=self._measured_content)

    def precheck(self) -> Fallback | None:
        """What rules the build out from the live state and the model alone, before any row is read."""
        return self.changes.precheck(self)

    def changed_inputs(self) -> list[str]:
        """The inputs other than the `from` relation whose identity changed since the last build."""
        recorded = self.previous.detail.get("other_inputs", {})
        return sorted(
            name
            for name, identity in other_inputs(self.ctx, self.identities).items()
            if recorded.get(name) != identity
        )

    def changed_partitions(self) -> list[str]:
        """The partitions the changes reach (read, never written)."""
        return self.changes.changed_partitions(self)

    def build(self) -> DeltaBuild | Fallback:
        try:
            return self._build()
        finally:
            self.rows.release(self)

    def _build(self) -> DeltaBuild | Fallback:
        from strata_dagster.engine.builds.incremental import Fallback
        from strata_dagster.engine.builds.segment import SchemaChanged

        fallback = self.precheck()
        if fallback is not None:
            return fallback
        changed_inputs = self.changed_inputs()
        joined = self.changes.joined_change(self, changed_inputs)
        if isinstance(joined, Fallback):
            return joined
        affected, facts, total = self.changes.changed_slices(self, joined)
        detail: dict[str, Any] = {"partitions": affected, "partitions_total": total}
        if changed_inputs:
            detail["partitions_reached_by_joins"] = len(joined.partitions)
        if not affected:
            self._drop(joined.tables)
            return self.writer.kept(detail, facts)
        previous_figures = self._previous_figures()
        in_full = self.cheaper_in_full(affected, previous_figures)
        if in_full is not None:
            self._drop(joined.tables)
            return in_full
        column = partition_column(self.ctx)
        keys_table = f"{self.ctx.table_name}__partitions"
        self.ctx.session.create_values_table(keys_table, column, self.typed_keys(affected))
        delta_query = self.rows.rows(self, affected, keys_table, detail)
        # The live rows the segment replaces, per partition: what equal partitions are found with.
        if previous_figures is not None and previous_figures.covers(self.ctx.follower_slices):
            # Recorded by the previous state, for its followers too: nothing of it is read.
            wanted = set(affected)
            replaced = _as_text({key: value for key, value in previous_figures.own.items() if key in wanted})
            detail["replaced_rows_read"] = False
        else:
            replaced = self._by_partition(self.live_rows(keys_table, affected))
            detail["replaced_rows_read"] = True
        removed = (
            sum(count for count, _ in replaced.values()),
            str(sum(int(hash_sum) for _, hash_sum in replaced.values())),
        )
        try:
            build = self.writer.write(self.ctx, delta_query, removed, keys_table, detail, facts)
        except SchemaChanged:
            self._forget_replaced(keys_table)
            self._drop(joined.tables)
            raise
        if not self.changes.completes_state:
            build = self._kept_if_rows_equal(build, facts)
        if _replacing_keys_table(build.record) != keys_table:  # also a kept state: the previous one
            self._forget_replaced(keys_table)  # no segment replaces those rows by this keys table
        if build.is_unchanged:
            self._drop(joined.tables)
            return build
        if build.record.content_hash != self.previous.content_hash:
            new_figures = self._segment_figures(build.record)
            new = None if new_figures is None else _as_text(new_figures.own)
            kept = self._keep_equal_partitions(build, affected, replaced, new)
            return _with_figures(kept, previous_figures, affected, new_figures)
        # The recomputed partitions hold exactly their live rows: the live state stays.
        self._forget_replaced(keys_table)
        self._drop([build.record.table_name, build.record.detail.get("keys_table"), *joined.tables])
        return self.writer.kept({**detail, "partitions_unchanged": len(affected)}, facts)

    def input_rows_of(self, partitions: list[str], keys_table: str) -> exp.Expr:
        """Over the raw `from` rows: whether a row is in one of `partitions` (named by `keys_table`)."""
        alias = self.ctx.compiled.base_relation
        ranges = self._ranges(partitions, alias)
        if ranges is not None and ranges.is_exact:
            # The ranges select exactly these partitions' rows; a key match beside them only
            # misleads DuckDB's estimates (a year of days: 1.2 s against 0.7 s over 5M rows).
            return ranges.predicate
        raw = raw_partition(self.ctx, qualifier=alias)
        predicate = keyed_rows(
            [partition_column(self.ctx)],
            [raw],
            keys_table=keys_table,
            is_null_free_filter=NULL_PARTITION not in partitions,
        )
        if ranges is not None:
            predicate = exp.and_(ranges.predicate, predicate, copy=False)
        elif isinstance(raw, exp.IntDiv) and isinstance(raw.this, exp.Column):
            spans = self._block_spans(raw.this, self._base_type(raw.this.name), partitions)
            if spans is not None:
                predicate = exp.and_(spans, predicate, copy=False)
        return predicate

    def _block_spans(self, column: exp.Column, type_name: str | None, affected: list[str]) -> exp.Expr | None:
        """For a model sliced by key blocks, spans of the raw key `column` holding the `affected`
        blocks (sql.segments.block_spans): a read of them skips the row groups of other keys."""
        if partition_grain(self.ctx) != "block" or NULL_PARTITION in affected:
            return None
        return block_spans(column, type_name, [int(key) for key in affected])

    def _base_type(self, column: str) -> str | None:
        """A column's type in the raw `from` input (None: it cannot be described)."""
        try:
            types = dict(self.ctx.session.describe(self.ctx.relation(self.ctx.compiled.base_relation)))
        except WarehouseError:
            return None
        return types.get(column)

    def live_rows(self, keys_table: str, affected: list[str]) -> exp.Table | exp.Query:
        """The live rows of the affected partitions (named by `keys_table`). When the previous
        state's segments replace whole partitions of this grain, they are held for the session
        under the key the models following this one ask with (engine.builds.model_slices): the rows this
        build's segment replaces, which only a scan of the whole previous state finds."""
        column, grain = partition_column(self.ctx), partition_grain(self.ctx)
        is_null_free = NULL_PARTITION not in affected
        if self._is_partitioned_like_now():
            return self.ctx.session.held_rows(
                self._replaced_rows_key(keys_table),
                lambda: replaced_rows(
                    self.segments,
                    [column],
                    grain,
                    [keys_table],
                    is_null_free=is_null_free,
                    exact=self._skipping_ranges(affected),
                    within=self._block_spans(
                        exp.column(column, table="__before"), self._previous_type(), affected
                    ),
                ),
            )
        live = exp.select("*").from_(self.previous_query.subquery("__live"))
        return live.where(
            keyed_rows(
                [column],
                [partition_key(exp.column(column, table="__live"), grain)],
                keys_table=keys_table,
                is_null_free_filter=is_null_free,
            ),
            copy=False,
        )

    def _skipping_ranges(self, affected: list[str]) -> exp.Expr | None:
        """The affected day or month partitions of the previous state as ranges of its partition
        column, when they select exactly those rows and let DuckDB skip row groups: a few runs of
        days, or up to MAX_SKIPPING_RANGES runs where the files' statistics show the rows
        clustered by the column (most row groups outside every run). None: match the keys."""
        grain = partition_grain(self.ctx)
        column = partition_column(self.ctx)
        type_name = self._previous_type()
        if grain not in ("day", "month") or type_name not in RANGE_TYPES:
            return None
        keys = [key for key in affected if key != NULL_PARTITION]
        if not keys:
            return None
        runs = partition_runs(grain, keys)
        if len(runs) > MAX_SKIPPING_RANGES:
            return None
        if len(runs) > MAX_EXACT_RANGES:
            tables = [segment.table for segment in self.segments]
            share = self.ctx.session.share_read_by_ranges(tables, column, type_name, runs)
            if share is None or share > MAX_SHARE_READ:
                return None
        ranges = partition_ranges(
            exp.column(column, table="__before"),
            type_name,
            grain,
            keys,
            NULL_PARTITION in affected,
            max_runs=MAX_SKIPPING_RANGES,
        )
        return ranges.predicate if ranges.is_exact else None

    def _is_partitioned_like_now(self) -> bool:
        """Whether the previous state's segments replace whole partitions of this model's grain."""
        detail = self.previous.detail
        return list(detail.get("merge_keys") or ()) == [partition_column(self.ctx)] and detail.get(
            "partition_grain"
        ) == partition_grain(self.ctx)

    def _replaced_rows_key(self, keys_table: str) -> tuple[object, ...]:
        return replaced_rows_key(
            self.segments, [partition_column(self.ctx)], partition_grain(self.ctx), [keys_table]
        )

    def _forget_replaced(self, keys_table: str) -> None:
        self.ctx.session.forget_held(self._replaced_rows_key(keys_table))  # nothing held: no-op

    def _previous_type(self) -> str | None:
        """The partition column's type in the previous state."""
        types = dict(tuple(column) for column in self.previous.detail.get("columns") or ())
        return types.get(partition_column(self.ctx))

    def _by_partition(self, relation: exp.Table | exp.Query) -> dict[str, tuple[int, str]]:
        """Row count and row-hash sum of `relation`'s rows per partition of the model's column."""
        key = partition_key(
            exp.column(partition_column(self.ctx), table=ROW_ALIAS), partition_grain(self.ctx)
        )
        groups = self.ctx.session.content_by_group(relation, key)
        return {NULL_PARTITION if name is None else name: figures for name, figures in groups.items()}

    def cheaper_in_full(
        self, affected: Sequence[str], figures: state_figures.SliceFigures | None = None
    ) -> Fallback | None:
        """A row-wise model (sliced by its source without a declaration) whose changed slices
        hold enough of its rows to start a compaction (the dead rows segment_compaction counts:
        MIN_DEAD_ROWS, and MAX_DEAD_SHARE of its rows) is built in full: the compaction after the
        segment would rewrite every row again. A day slicing by a change column does this after
        late updates: the updated rows leave their old days, spread over the whole state (at 10M
        orders, 0.1% updated reached days holding 78% of the rows: 2.0 s by slices, 1.4 s in
        full). A declared `partitioned_by` keeps its partitions (they are what a backfill asks
        for), and a model over another model's slices its segments' (their rows were written once
        already). `figures`: the previous state's, when the caller has them."""
        from strata_dagster.engine.builds import segment_compaction
        from strata_dagster.engine.builds.incremental import Fallback

        if ROW_WISE not in self.previous.detail or not isinstance(self.changes, ByPartitionFingerprints):
            return None  # checked first: `strata plan` asks this of every partitioned model
        figures = figures if figures is not None else self._previous_figures()
        if figures is None:
            return None
        live = self.previous.row_count
        wanted = set(affected)
        replaced = sum(count for key, (count, _) in figures.own.items() if key in wanted)
        if replaced < segment_compaction.MIN_DEAD_ROWS or replaced < segment_compaction.MAX_DEAD_SHARE * live:
            return None
        return Fallback(
            f"the {len(affected)} changed slices hold {replaced:,} of its {live:,} rows: "
            "a full build writes fewer than a segment and the compaction after it"
        )

    def _previous_figures(self) -> state_figures.SliceFigures | None:
        return state_figures.recorded(self.previous) if self._records_figures() else None

    def _records_figures(self) -> bool:
        """Whether states of this model record their figures (engine.builds.state_figures): partitions
        by day or month, few enough to record."""
        return partition_grain(self.ctx) in state_figures.RECORDED_GRAINS

    def _kept_if_rows_equal(self, build: DeltaBuild, facts: dict[str, Any]) -> DeltaBuild:
        """A partial rebuild whose partitions hold the rows they held: the current snapshot stays."""
        if build.is_unchanged or build.record.content_hash != self.previous.content_hash:
            return build
        self.ctx.session.drop_snapshot(build.record.table_name)
        replaced = build.record.detail.get("keys_table")
        if replaced:
            self.ctx.session.drop_snapshot(str(replaced))
        return self.writer.kept({**build.detail, "rows_equal": True}, facts)

    def _measured_content(self, name: str) -> Content:
        """The new segment's content, from the scan that measures its figures when this model
        records them (one scan of its rows, not two)."""
        if self._records_figures():
            # The slices the previous state recorded stay recorded, whether or not their followers
            # are in this run.
            followers = {**state_figures.recorded_slices(self.previous), **self.ctx.follower_slices}
            figures = measure_figures(self.ctx, snapshot_table(name), followers)
            if figures is not None:
                self._measured = (name, figures)
                return figures.content(self.ctx.session.describe(snapshot_table(name)))
        return self.ctx.session.content(snapshot_table(name))

    def _segment_figures(self, record: SnapshotRecord) -> state_figures.SliceFigures | None:
        """The figures of the rows the new segment holds, as its build measured them."""
        detail = record.detail
        segment = detail.get("compacted_delta") if detail.get("compacted") else record.table_name
        if self._measured is None or self._measured[0] != segment:
            return None
        return self._measured[1]

    def _keep_equal_partitions(
        self,
        build: DeltaBuild,
        affected: list[str],
        old: dict[str, tuple[int, str]],
        new: dict[str, tuple[int, str]] | None = None,
    ) -> DeltaBuild:
        """Recomputed partitions whose rows equal their live rows (`old`) keep their live segment
        when they hold at least MIN_EQUAL_SHARE of the new segment's rows: the segment is written
        again holding, and its keys table then replaces, only the partitions whose rows changed.
        Fewer stay in the segment, with the rows they hold. `new`: the new segment's figures per
        partition, when they were measured already."""
        from strata_dagster.engine.builds import segment_compaction
        from strata_dagster.engine.builds.segment import DeltaBuild

        record = build.record
        keys_table = record.detail.get("keys_table")
        if keys_table is None or record.detail.get("compacted"):
            return build
        session = self.ctx.session
        column, grain = partition_column(self.ctx), partition_grain(self.ctx)
        if new is None:
            new = self._by_partition(snapshot_table(record.table_name))
        equal = {key for key in affected if key in new and new[key] == old.get(key)}
        changed = [key for key in affected if key not in equal]
        if not equal or not changed:
            return build
        equal_rows = sum(new[key][0] for key in equal)
        if equal_rows < MIN_EQUAL_SHARE * sum(count for count, _ in new.values()):
            rewritten: dict[str, Any] = {"partitions_unchanged": len(equal), "unchanged_rewritten": True}
            return replace(build, detail={**build.detail, **rewritten})
        session.create_values_table(keys_table, column, self.typed_keys(changed))
        # The keys table now names the changed partitions: the rows held for it, those of the
        # changed ones (the followers read them, with no new scan of the state).
        kept_rows = keyed_rows([column], [partition_key(exp.column(column), grain)], keys_table=keys_table)
        session.narrow_held(self._replaced_rows_key(keys_table), kept_rows)
        narrowed = f"{record.table_name}__narrowed"
        segment = snapshot_table(record.table_name).as_(ROW_ALIAS)
        in_changed = keyed_rows(
            [column],
            [partition_key(exp.column(column, table=ROW_ALIAS), grain)],
            keys_table=keys_table,
            is_null_free_filter=NULL_PARTITION not in changed,
        )
        session.create_snapshot(narrowed, exp.select("*").from_(segment).where(in_changed))
        session.drop_snapshot(record.table_name)
        session.rename_snapshot(narrowed, record.table_name)
        replaced = sum(old[key][0] for key in changed if key in old)
        if replaced == 0:
            session.drop_snapshot(keys_table)
        rows = sum(new[key][0] for key in changed if key in new)
        figures = {
            "keys_table": keys_table if replaced else None,
            "partitions_unchanged": len(equal),
            "rows_merged": rows,
            "rows_replaced": replaced,
            "segment_rows": rows,
            "segment_hash_sum": str(sum(int(new[key][1]) for key in changed if key in new)),
        }
        stored = record.detail.get(segment_compaction.STORED_ROWS)
        if stored is not None:
            figures[segment_compaction.STORED_ROWS] = int(stored) - int(record.detail["segment_rows"]) + rows
        outcome = {key: value for key, value in figures.items() if key != "keys_table"}
        return DeltaBuild(
            replace(record, detail={**record.detail, **figures}), False, {**build.detail, **outcome}
        )

    def _drop(self, tables: Sequence[str | None]) -> None:
        for table in tables:
            if table:
                self.ctx.session.drop_snapshot(table)

    def _ranges(self, affected: list[str], alias: str) -> PartitionRanges | None:
        """The affected day or month partitions as ranges of the raw column they are cut from, when
        the partition expression is that column (or its cast to DATE or TIMESTAMP) and the column
        is a DATE or TIMESTAMP: then row groups outside every range are never read."""
        grain = partition_grain(self.ctx)
        compiled = self.ctx.compiled
        base = compiled.traced_column(partition_column(self.ctx))
        if grain not in ("day", "month") or base is None:
            return None
        raw = compiled.base_expression(base, qualifier=alias)
        if isinstance(raw, exp.Cast) and raw.to.this in (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP):
            raw = raw.this
        if not isinstance(raw, exp.Column):
            return None
        try:
            types = dict(self.ctx.session.describe(self.ctx.relation(compiled.base_relation)))
        except WarehouseError:
            return None
        type_name = types.get(raw.name)
        if type_name not in RANGE_TYPES:
            return None
        keys = [key for key in affected if key != NULL_PARTITION]
        return partition_ranges(raw, type_name, grain, keys, NULL_PARTITION in affected)

    def literal(self, key: str) -> exp.Expr:
        """A partition key as a literal of the partition column's type."""
        (literal,) = self.typed_keys([key]).literals()
        return literal

    def typed_keys(self, keys: Iterable[str]) -> TypedTexts:
        """Partition keys as texts of the partition column's type (NULL_PARTITION: NULL)."""
        grain = partition_grain(self.ctx)
        if grain in ("day", "month"):
            type_name = "DATE"
        elif grain in KEY_GRAINS:
            type_name = "UBIGINT" if grain == "bucket" else "BIGINT"
        else:
            type_name = self._previous_type() or "VARCHAR"
        return TypedTexts(type_name, tuple(None if key == NULL_PARTITION else key for key in keys))
