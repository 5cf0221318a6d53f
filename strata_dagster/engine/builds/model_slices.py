"""Models over other models, maintained from their inputs' new segments.

An incremental, partitioned or row-wise model's state is a list of immutable segments: each build
appends one, holding its rows and, for an upsert or a partition build, the keys it replaces in the
segments before it. So what changed in such an input between the state a build of a model reading
it saw and its state now is exactly its new segments: the rows they add, and the earlier rows whose
keys they replace. A model whose rows fall into slices that never meet is rebuilt for the slices
those rows fall in, each slice completely, from the input as it is now, into a segment replacing
the same slices (engine.builds.partitions does the work):

- a row-wise model (filter, let, derive, select, expand, inner or left joins) by its input's key:
  the merge key of an upsert or append_new input, or the partition column of a partitioned or
  row-wise one, when the model carries it unchanged;
- a model with window functions by a column that every window's PARTITION BY names, traced to its
  `from` and carried to the output: rows of other window partitions are never read, so a key that
  moved from one window partition to another recomputes both;
- a partitioned model (`partitioned_by`) by its own partitions.

A row-wise model without such a key over inputs that only gained rows (append models), and a
`union all` of such inputs closing a model, gain the rows their pipeline gives for the new rows
alone: the union of the branches over each input's new segments (a branch whose input did not
change reads nothing).

When an input's segments do not extend the ones the last build read (it was rebuilt in full,
compacted or rolled back), nothing says what changed: the model is built in full, with that reason
(a partitioned model that recorded partition fingerprints compares them instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.determinism import volatile_calls
from strata_dagster.engine.builds import partitions, state_figures
from strata_dagster.engine.builds.partitions import (
    NULL_PARTITION,
    STRATEGY,
    UPSTREAM_SEGMENTS,
    PartitionBuild,
    raw_partition,
)
from strata_dagster.engine.builds.row_wise import RowWise, describe
from strata_dagster.engine.builds.state_figures import SliceFigures
from strata_dagster.language.definition import (
    AggregateStep,
    GroupStep,
    JoinStep,
    Model,
    PartitionSpec,
    Project,
    SetOperationStep,
)
from strata_dagster.sql.content import ROW_ALIAS
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import Segment, composite_query, replaced_rows_key, union_all
from strata_dagster.sql.segments import replaced_rows as segments_replaced_rows
from strata_dagster.state.history import HistoryReader, SnapshotRecord
from strata_dagster.state.states import KEYS_NULL_FREE, grain_of, merge_keys_of, segments_of

if TYPE_CHECKING:
    # Imported where a build uses them: a run's decisions read this module's analysis alone.
    from strata_dagster.engine.builds import joined_inputs
    from strata_dagster.engine.builds.incremental import Fallback
    from strata_dagster.engine.builds.segment import DeltaBuild
    from strata_dagster.engine.builds.strategy import IncrementalContext

APPENDED = "appended"  # strategy of a state that only gains the rows its inputs' new rows give


@dataclass(frozen=True)
class ModelSlices:
    """How a model over other models is maintained from their new segments."""

    spec: PartitionSpec | None  # the slices, over an output column; None: it only gains rows
    inputs: tuple[str, ...]  # the input models whose segments are followed
    why: str  # what the slices are, for history: "the window key", "the key of `stg_orders`"

    @property
    def text(self) -> str:
        if self.spec is None:
            names = ", ".join(self.inputs)
            return f"the new rows of {names}"
        return f"{describe(self.spec)} ({self.why})"

    def as_partitioned(self, model: Model) -> Model:
        """The model as the partition builder sees it: partitioned by its slices."""
        assert self.spec is not None
        return replace(model, properties=replace(model.properties, partitioned_by=self.spec))


Maintained = RowWise | ModelSlices | str  # how a plain model is maintained, or why it is not


@dataclass(frozen=True)
class UpstreamChange:
    """What an input model's state gained since the state a build read."""

    model: str
    before: tuple[Segment, ...]  # the segments the last build read
    added: tuple[Segment, ...]  # its new segments, oldest first
    merge_keys: tuple[str, ...]  # what its segments' keys tables hold (empty: segments only add rows)
    grain: str | None
    ids: tuple[str, ...]  # its segment ids now: what the new build records
    # The figures its state the last build read, and its state now, recorded (engine.builds.state_figures).
    figures: tuple[SliceFigures | None, SliceFigures | None] = (None, None)

    @property
    def is_append_only(self) -> bool:
        return not self.merge_keys or all(segment.keys_table is None for segment in self.added)


# -- which models, sliced how ---------------------------------------------------------------------
def _input_key(project: Project, name: str, earlier: Mapping[str, Maintained]) -> tuple[str, str] | None:
    """(grain, column) of the slices an input model's segments replace, when one column names them."""
    props = project.models[name].properties
    if props.partitioned_by is not None:
        return props.partitioned_by.grain, props.partitioned_by.column
    if props.merge_strategy in ("upsert", "append_new") and len(props.merge_keys or ()) == 1:
        return "key", (props.merge_keys or ())[0]
    maintained = earlier.get(name)
    if isinstance(maintained, (RowWise, ModelSlices)) and maintained.spec is not None:
        return maintained.spec.grain, maintained.spec.column
    return None


def _input_problem(project: Project, name: str, earlier: Mapping[str, Maintained]) -> str | None:
    """Why the segments of input model `name` do not say which of its rows changed, if they do not."""
    model = project.models[name]
    props = model.properties
    if props.is_view:
        return f"`{name}` is a `materialize: view` model: it has no segments to follow"
    if props.merge_strategy != "replace" or props.partitioned_by is not None:
        return None
    if isinstance(earlier.get(name), (RowWise, ModelSlices)):
        return None
    return f"`{name}` is rebuilt in full on every change, so nothing says which of its rows changed"


def _carried(compiled: CompiledModel, base: str) -> str | None:
    """The output column carrying base column `base` unchanged (its own name first)."""
    if compiled.traced_column(base) == base:
        return base
    return next((output for output, traced in compiled.lineage if traced == base), None)


def slicing(
    project: Project, compiled: CompiledModel, model: Model, earlier: Mapping[str, Maintained]
) -> Maintained:
    """How a plain model whose `from` is a model is maintained from its inputs' segments, or why
    it is not (a reason for history)."""
    base = compiled.base_relation
    problem = _input_problem(project, base, earlier)
    if problem is not None:
        return problem
    if volatile_calls(model):
        return "it calls a volatile function (now(), random(), ...)"
    operations = [step for step in model.steps if isinstance(step, SetOperationStep)]
    for step in model.steps:
        if isinstance(step, (GroupStep, AggregateStep)):
            return "it groups rows (an output row reads many input rows)"
        if isinstance(step, JoinStep) and step.kind not in ("inner", "left"):
            return f"a {step.kind} join brings rows of `{step.relation}` that no `from` row gives"
    if operations:
        return _union_slicing(project, compiled, model, operations, earlier)
    if compiled.has_window:
        for key in compiled.window_keys or ():
            output = _carried(compiled, key)
            if output is not None:
                return ModelSlices(PartitionSpec("key", output, model.location), (base,), "the window key")
        return (
            "a window function reads other rows, and no column of its PARTITION BY is a column of "
            f"`{base}` carried unchanged to the output"
        )
    input_key = _input_key(project, base, earlier)
    output = _carried(compiled, input_key[1]) if input_key is not None else None
    if input_key is not None and output is not None:
        spec = PartitionSpec(input_key[0], output, model.location)  # type: ignore[arg-type]  # a grain PartitionSpec gave
        return ModelSlices(spec, (base,), f"the key of `{base}`")
    if project.models[base].properties.merge_strategy == "append":
        return ModelSlices(None, (base,), "")
    if input_key is None:
        return f"`{base}` has no single key or partition column to slice by"
    return f"the model does not carry `{input_key[1]}` of `{base}` unchanged, so its rows cannot be sliced"


def _union_slicing(
    project: Project,
    compiled: CompiledModel,
    model: Model,
    operations: list[SetOperationStep],
    earlier: Mapping[str, Maintained],
) -> Maintained:
    step = operations[0]
    if len(operations) > 1 or step.operator != "union all" or model.steps[-1] is not step:
        return "a set operation other than one `union all` closing the pipeline mixes rows of its sides"
    if compiled.has_window:
        return "a window function beside a set operation reads other rows"
    if step.relation not in project.models:
        return f"`union all {step.relation}` reads a source, whose rows have no segments"
    problem = _input_problem(project, step.relation, earlier)
    if problem is not None:
        return problem
    return ModelSlices(None, (compiled.base_relation, step.relation), "")


def partitioned_over_model(
    project: Project, compiled: CompiledModel, model: Model, earlier: Mapping[str, Maintained]
) -> ModelSlices | None:
    """A declared partitioned model whose `from` is a model with segments: its partitions are found
    from that model's new segments."""
    spec = model.properties.partitioned_by
    base = compiled.base_relation
    if spec is None or model.properties.merge_strategy != "replace" or base not in project.models:
        return None
    if partitions.locality_problem_of(model, compiled) is not None or volatile_calls(model):
        return None
    if _input_problem(project, base, earlier) is not None:
        return None
    return ModelSlices(spec, (base,), "its partitions")


# -- what changed in the inputs -------------------------------------------------------------------
MAX_EXPANSIONS = 4  # compactions of an input looked through to find the segments a build read


def upstream_change(
    reader: HistoryReader,
    name: str,
    read: list[str] | None,
    now: SnapshotRecord,
    exists: Callable[[str], bool],
) -> UpstreamChange | str:
    """What input model `name` gained since the segments `read` (recorded by the last build), or why
    that cannot be told. A compaction since then is looked through: it keeps the segments it merged
    (every one, or those after the base) and its own delta's segment."""
    if read is None:
        return f"the last build recorded no segments of `{name}`"
    ids = list(now.segment_ids)
    # The input's state is present: reused only when its tables are, else built in this run.
    entries = list(zip(ids, segments_of(reader, now), strict=True))
    is_expanded = False
    for _ in range(MAX_EXPANSIONS + 1):
        if [entry_id for entry_id, _ in entries[: len(read)]] == read:
            break
        # The first segment that is not one read: a compaction merged the segments from there on
        # (all of them into a new base, or those after the base).
        at = next(
            (
                index
                for index, (entry_id, _) in enumerate(entries)
                if index >= len(read) or entry_id != read[index]
            ),
            len(entries) - 1,
        )
        head = now if entries[at][0] == now.snapshot_id else reader.snapshot(entries[at][0])
        merged = _merged_segments(reader, head) if head is not None else None
        if merged is None:
            return (
                f"`{name}` was rebuilt, compacted or rolled back since the last build: its change is not a list "
                "of new segments"
            )
        entries = entries[:at] + merged + entries[at + 1 :]
        is_expanded = True
    else:
        return f"`{name}` was compacted more than {MAX_EXPANSIONS} times since the last build"
    segments = [segment for _, segment in entries]
    before = reader.snapshot(read[-1]) if read else None
    if before is not None and list(before.segment_ids) != list(read):
        before = None
    if is_expanded and not all(
        exists(table) for segment in segments for table in (segment.table, segment.keys_table) if table
    ):
        return f"`{name}` was compacted since the last build, and the segments it merged are gone"
    return UpstreamChange(
        name,
        tuple(segments[: len(read)]),
        tuple(segments[len(read) :]),
        tuple(merge_keys_of(now)),
        grain_of(now),
        tuple(ids),
        (state_figures.recorded(before), state_figures.recorded(now)),
    )


def _merged_segments(reader: HistoryReader, head: SnapshotRecord) -> list[tuple[str, Segment]] | None:
    """The segments a compacted segment stands for: those it merged and its own delta's segment."""
    after, delta = head.detail.get("compacted_after"), head.detail.get("compacted_delta")
    if not after or not delta:
        return None
    entries = []
    for segment_id in after:
        record = reader.snapshot(segment_id)
        if record is None:
            return None
        detail = record.detail
        entries.append(
            (
                segment_id,
                Segment(record.table_name, detail.get("keys_table"), bool(detail.get(KEYS_NULL_FREE))),
            )
        )
    delta_segment = Segment(delta, head.detail.get("compacted_delta_keys"))
    return [*entries, (f"{head.snapshot_id}:delta", delta_segment)]


def _union(tables: list[str]) -> exp.Query:
    return union_all([exp.select("*").from_(snapshot_table(table)) for table in tables], by_name=True)


def added_rows(change: UpstreamChange) -> exp.Query | None:
    """Every row of the input's new segments (None: it has none)."""
    return _union([segment.table for segment in change.added]) if change.added else None


def replaced_rows(session: Session, change: UpstreamChange) -> exp.Table | exp.Query | None:
    """The rows of the state the last build read whose keys a new segment replaces: found once
    per session (a scan of that whole state) for every model following the same change, and for
    the upsert that made it."""
    keys_tables = [segment.keys_table for segment in change.added if segment.keys_table]
    if not keys_tables or not change.merge_keys or not change.before:
        return None
    keys = change.merge_keys

    def rows() -> exp.Query:
        is_null_free = all(session.count_null_keys(table, keys) == 0 for table in keys_tables)
        return segments_replaced_rows(
            change.before, keys, change.grain, keys_tables, is_null_free=is_null_free
        )

    return session.held_rows(replaced_rows_key(change.before, keys, change.grain, keys_tables), rows)


Figures = dict[str, tuple[int, int]]  # slice -> row count and row-hash sum


def _figures(ctx: IncrementalContext, rows: exp.Table | exp.Query) -> Figures:
    groups = ctx.session.content_by_group(rows, raw_partition(ctx, qualifier=ROW_ALIAS))
    return {
        NULL_PARTITION if key is None else key: (count, int(hash_sum))
        for key, (count, hash_sum) in groups.items()
    }


def slice_figures(ctx: IncrementalContext, changes: list[UpstreamChange]) -> tuple[Figures, Figures]:
    """Row count and row-hash sum per slice (as text, NULL_PARTITION for NULL) of the rows the
    inputs' new segments add, as the inputs hold them now, and of the earlier rows they replace:
    each input row is a row of the model's `from`."""
    added: Figures = {}
    replaced: Figures = {}
    key = state_figures.key_text(raw_partition(ctx, qualifier=ROW_ALIAS))
    for change in changes:
        before, now = change.figures
        if before is not None and now is not None and before.covers([key]) and now.covers([key]):
            # Both states of the input recorded their rows per slice: a slice whose rows changed
            # has other totals (the rows of the slices no segment touched are the same rows).
            totals_before, totals_now = before.totals(key), now.totals(key)
            for name in set(totals_before) | set(totals_now):
                if totals_before.get(name) != totals_now.get(name):
                    _add(added, name, totals_now.get(name, (0, 0)))
                    _add(replaced, name, totals_before.get(name, (0, 0)))
            continue
        found: list[tuple[dict[str, tuple[int, int]], exp.Table | exp.Query]] = []
        if change.added:
            found.append((added, composite_query(change.added, change.merge_keys, change.grain)))
        gone = replaced_rows(ctx.session, change)
        if gone is not None:
            found.append((replaced, gone))
        for into, rows in found:
            for name, figures in _figures(ctx, rows).items():
                _add(into, name, figures)
    return added, replaced


def _add(into: Figures, name: str, figures: tuple[int, int]) -> None:
    before = into.get(name, (0, 0))
    into[name] = (before[0] + figures[0], before[1] + figures[1])


def changed_slices(ctx: IncrementalContext, changes: list[UpstreamChange]) -> set[str]:
    """The slices holding a row an input's new segments added or replaced."""
    return _differing(*slice_figures(ctx, changes))


def _differing(added: Figures, replaced: Figures) -> set[str]:
    """The slices whose rows the new segments changed: a slice whose replaced rows come back
    equal (a `lateness` re-read of unchanged rows, an update back to the same values) holds the
    rows it held, by the row-hash figures every partition comparison trusts."""
    return {key for key in set(added) | set(replaced) if added.get(key) != replaced.get(key)}


def follower_slices(
    models: Mapping[str, Model],
    compiled: Mapping[str, CompiledModel],
    followed: Mapping[str, ModelSlices],
) -> dict[str, dict[str, exp.Expr]]:
    """Per input model, the day or month slices of its rows that the models following its segments
    compare (named as in engine.builds.state_figures): what its states record figures by.
    `models`: each model as built (a row-wise one partitioned by its slicing)."""
    found: dict[str, dict[str, exp.Expr]] = {}
    for name, slices in followed.items():
        model, statement = models[name], compiled[name]
        if slices.spec is None or slices.spec.grain not in state_figures.RECORDED_GRAINS:
            continue
        if statement.base_relation not in slices.inputs or partitions.locality_problem_of(model, statement):
            continue
        expression = partitions.raw_partition_of(model, statement, qualifier=ROW_ALIAS)
        found.setdefault(statement.base_relation, {})[state_figures.key_text(expression)] = expression
    return found


def recorded_segments(changes: list[UpstreamChange]) -> dict[str, list[str]]:
    return {change.model: list(change.ids) for change in changes}


# -- builds ---------------------------------------------------------------------------------------
class ByUpstreamSegments:
    """A `PartitionBuild`'s change finder for a model following its input models' segments: the
    slices their new segments (and the changed joined inputs) reach, recomputed completely.

    Args:
        changes: what each followed input gained since the live state was built, or why that is
            not a list of segments (the model is then built in full).
    """

    follows_segments = True
    completes_state = True

    def __init__(self, changes: list[UpstreamChange] | str) -> None:
        self.changes = changes

    def precheck(self, build: PartitionBuild) -> Fallback | None:
        from strata_dagster.engine.builds.incremental import Fallback

        detail = build.previous.detail
        if build.previous.model_fingerprint != build.ctx.fingerprint:
            return Fallback("the model's code changed since its last build")
        if detail.get("strategy") != STRATEGY or detail.get("partition_grain") != partitions.partition_grain(
            build.ctx
        ):
            return Fallback("the previous state was not built by slices of this kind")
        if isinstance(self.changes, str):
            return Fallback(self.changes)
        return None

    def joined_change(
        self, build: PartitionBuild, changed_inputs: list[str]
    ) -> joined_inputs.JoinedChange | Fallback:
        return partitions.joined_change(build, changed_inputs)

    def changed_partitions(self, build: PartitionBuild) -> list[str]:
        """The slices the inputs' new segments reach (read, never written): what `plan` names."""
        assert not isinstance(self.changes, str)
        return sorted(changed_slices(build.ctx, self.changes))

    def changed_slices(
        self, build: PartitionBuild, joined: joined_inputs.JoinedChange
    ) -> tuple[list[str], dict[str, Any], int | None]:
        """The slices to recompute, and the facts the new state records.

        Returns:
            tuple: the slices whose rows the new segments (or the changed joined inputs) change,
            the facts (the followed segments, the other inputs' identities, a declared
            partitioned model's fingerprints brought up to date), and how many slices there are
            (None for slices by key).
        """
        from strata_dagster.engine.builds import joined_inputs

        assert not isinstance(self.changes, str)
        reached = joined.reached
        added, replaced = slice_figures(build.ctx, self.changes)
        affected = sorted(_differing(added, replaced) | reached)
        facts: dict[str, Any] = {
            UPSTREAM_SEGMENTS: recorded_segments(self.changes),
            "other_inputs": partitions.other_inputs(build.ctx, build.identities),
            joined_inputs.FIGURES: joined.figures,
        }
        before = build.previous.detail.get("partition_fingerprints")
        if before is None:
            return affected, facts, _partition_count(build.ctx)
        # A declared partitioned model keeps its per-partition input figures exact (its stale
        # partitions are read from them, engine.reads.partition_staleness): a partition's rows now are
        # its rows then, less those replaced, plus those added (row-hash sums add and subtract).
        recorded = dict(before)
        for key in set(added) | set(replaced):
            count, hash_sum = before.get(key) or (0, "0")
            count = int(count) - replaced.get(key, (0, 0))[0] + added.get(key, (0, 0))[0]
            total = int(hash_sum) - replaced.get(key, (0, 0))[1] + added.get(key, (0, 0))[1]
            if count:
                recorded[key] = [count, str(total)]
            else:
                recorded.pop(key, None)
        facts["partition_fingerprints"] = recorded
        return affected, facts, len(recorded)


def _partition_count(ctx: IncrementalContext) -> int | None:
    """How many day or month partitions the input's rows fall in now (one cheap grouped scan of a
    column's range); None for slices by key, as many as the key's values."""
    columns = [name for name in ctx.compiled.base_columns or () if name not in ctx.compiled.let_names]
    if partitions.partition_grain(ctx) == "key" or not columns:
        return None
    relation = ctx.relation(ctx.compiled.base_relation)
    return len(ctx.session.content_by_group(relation, raw_partition(ctx, qualifier=ROW_ALIAS), (columns[0],)))


class AppendedBuilder:
    """A model that only gains rows: its pipeline over its inputs' new rows, as a new segment
    written over the live state the way a delta's is (engine.builds.segment).

    Args:
        ctx: the build's context (engine.decisions.scope.RunScope.incremental_context).
        previous: the live state the new rows go over.
        segments: the live state's segments.
        identities: each input's content identity in this run (an input it does not follow
            that changed makes the model full: every row may read it).
        changes: what each followed input gained since the live state was built, or why that is
            not a list of segments.

    Returns (from `build`):
        DeltaBuild | Fallback: the new state (the pipeline over the new rows appended), or the
        live state kept when they give no row; a Fallback when an input replaced rows it held.
    """

    def __init__(
        self,
        ctx: IncrementalContext,
        previous: SnapshotRecord,
        segments: list[Segment],
        identities: dict[str, str],
        changes: list[UpstreamChange] | str,
    ) -> None:
        from strata_dagster.engine.builds.incremental import segment_writer

        self.ctx = ctx
        self.previous = previous
        self.segments = segments
        self.writer = segment_writer(ctx, previous, segments)
        self.identities = identities
        self.changes = changes

    def precheck(self) -> Fallback | None:
        from strata_dagster.engine.builds.incremental import Fallback

        detail = self.previous.detail
        if self.previous.model_fingerprint != self.ctx.fingerprint:
            return Fallback("the model's code changed since its last build")
        if detail.get("strategy") != APPENDED:
            return Fallback("the previous state was not built from its inputs' new rows")
        if isinstance(self.changes, str):
            return Fallback(self.changes)
        for change in self.changes:
            if not change.is_append_only:
                return Fallback(
                    f"`{change.model}` replaced rows it held (an update or a delete), and the model keeps no "
                    "key to find the rows they gave"
                )
        followed = {change.model for change in self.changes}
        recorded = detail.get("other_inputs") or {}
        for name, identity in sorted(self.identities.items()):
            if name not in followed and recorded.get(name) != identity:
                return Fallback(f"`{name}` changed, and every row may read it")
        return None

    def build(self) -> DeltaBuild | Fallback:
        """Write the model's pipeline over its inputs' new rows as the new state's segment."""
        fallback = self.precheck()
        if fallback is not None:
            return fallback
        assert not isinstance(self.changes, str)
        relation = self.ctx.relation
        added: dict[str, exp.Table | exp.Query] = {}
        for change in self.changes:
            rows = added_rows(change)
            if rows is None:
                # An input that did not change gives no new row: its branch reads nothing.
                rows = exp.select("*").from_(_readable(relation(change.model))).where(exp.false())
            added[change.model] = rows
        self.ctx = replace(self.ctx, relation=lambda name: added[name] if name in added else relation(name))
        facts = {UPSTREAM_SEGMENTS: recorded_segments(self.changes), "other_inputs": self._others()}
        new_rows = sum(len(change.added) for change in self.changes)
        detail: dict[str, Any] = {"segments_read": new_rows}
        return self.writer.write(
            self.ctx,
            self.ctx.compiled.statement.copy(),
            (0, "0"),
            None,
            detail,
            facts,
            rows_left_below=False,  # no window, so no region below one to count
        )

    def _others(self) -> dict[str, str]:
        followed = {change.model for change in self.changes} if not isinstance(self.changes, str) else set()
        return {name: identity for name, identity in self.identities.items() if name not in followed}


def _readable(relation: exp.Table | exp.Query) -> exp.Expression:
    return relation.subquery("__none") if isinstance(relation, exp.Query) else relation.copy()


def appended_detail(
    identities: dict[str, str], inputs: tuple[str, ...], segments: dict[str, list[str]]
) -> dict[str, Any]:
    """What a full build of a model that only gains rows records for its next build."""
    return {
        "strategy": APPENDED,
        "merge_keys": [],
        "other_inputs": {name: identity for name, identity in identities.items() if name not in inputs},
        UPSTREAM_SEGMENTS: segments,
    }


def sliced_detail(
    ctx: IncrementalContext, identities: dict[str, str], segments: dict[str, list[str]]
) -> dict[str, Any]:
    """What a full build of a sliced plain model records: no fingerprint per slice (a key's slices
    are as many as its values), the inputs' segments instead."""
    from strata_dagster.engine.builds import joined_inputs

    return {
        "strategy": STRATEGY,
        "merge_keys": [partitions.partition_column(ctx)],
        "partition_grain": partitions.partition_grain(ctx),
        "other_inputs": partitions.other_inputs(ctx, identities),
        joined_inputs.FIGURES: joined_inputs.record_figures(ctx),
        UPSTREAM_SEGMENTS: segments,
    }
