"""A model built in full: its whole query into a new snapshot, kept only if its rows are new.

Every model can be built this way: a `replace` model always is, an incremental one on its first
build, when a delta is ruled out, or when a delta falls back. An incremental model's full snapshot
records what its next delta checks the input against (watermark, window figures, partition
fingerprints, the segments of the models it follows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.compile.determinism import volatile_calls
from strata_dagster.engine.builds import partitions
from strata_dagster.engine.builds.incremental import (
    full_detail,
    full_key_sum,
    full_output_facts,
    key_cdc_columns,
    output_watermark,
)
from strata_dagster.engine.builds.model_slices import ModelSlices, appended_detail, sliced_detail
from strata_dagster.engine.builds.partitions import UPSTREAM_SEGMENTS
from strata_dagster.engine.builds.pins import check_pins, unique_checked
from strata_dagster.engine.builds.row_wise import ROW_WISE
from strata_dagster.engine.builds.state_figures import FIGURES, RECORDED_GRAINS, SliceFigures
from strata_dagster.engine.builds.strategy import Built, IncrementalContext, Relation, Target, as_build_error
from strata_dagster.engine.paths import CUTOFF, FULL, REPLACED_SOURCES, UNPARTITIONED, StrategyName
from strata_dagster.faults import checkpoint
from strata_dagster.sql.content import Content
from strata_dagster.sql.key_bounds import KeyBounds
from strata_dagster.sql.render import snapshot_table
from strata_dagster.state.history import SnapshotRecord

# A plain model's rows counted and hashed by the partitions of a model reading it as `from`: the
# partition expression over its rows, and what takes the figures (engine.decisions.dispatch).
GroupedFor = tuple[exp.Expr, Callable[[dict[str | None, tuple[int, str]]], None]]
# An upsert's key-and-cdc figures (row count and hash sum) and its key bounds, if recorded.
KeyFigures = tuple[tuple[int, str], KeyBounds | None]
# A state's detail key: the sources its full build read through an override replacing their rows.


@dataclass
class FullBuild:
    """The model's query into a new snapshot; equal rows keep a present state instead (early cutoff).

    Args:
        target: what the build writes.
        session: the run's session.
        relation: what each input is read from in this run.
        current: the live state (None: first build, or a table of it went missing).
        existing: the present state the build key names, if any (kept when the rows are equal).
        is_state_present: whether a state is there to keep.
        context: an incremental model's build context (None for a `replace` model): its new
            state records what its next delta checks the input against.
        replaced: the sources read through an override replacing their rows (recorded).
        is_partitioned: partitioned as built: the state records fingerprints per partition.
        is_refresh: `--full-refresh` of this model: no live state is kept for equal rows.
        followed: how the model follows its input models' segments, if it does.
        is_sliced: a plain model sliced by its input model's key (engine.builds.model_slices).
        identities: each input's content identity; upstream_segments: the followed inputs'.
        row_wise: the slicing a row-wise model is maintained by (history's words).
        not_maintained: why a model read row-wise is not maintained so (recorded on a new state).

    Returns (from `build`):
        Built: a new snapshot ("full"), or a present state with the same rows ("cutoff",
        `is_new=False`; the new table is dropped).
    """

    strategy: ClassVar[StrategyName] = "full"

    target: Target
    session: Session
    relation: Relation
    current: SnapshotRecord | None  # the live state
    existing: SnapshotRecord | None  # the state the build key names, if present
    is_state_present: Callable[[SnapshotRecord | None], bool]
    # An incremental model's build context: its new state records what its next delta needs.
    context: IncrementalContext | None = None
    replaced: Sequence[str] = ()  # sources read through an override replacing their rows
    is_partitioned: bool = False  # partitioned as built (a row-wise model by its slicing)
    is_refresh: bool = False  # `--full-refresh` of this model: no state is kept for equal rows
    followed: ModelSlices | None = None  # how it follows its input models' segments, if it does
    is_sliced: bool = False  # a plain model sliced by its input model's key (engine.builds.model_slices)
    identities: Mapping[str, str] = field(default_factory=dict)  # each input's content identity
    upstream_segments: Mapping[str, list[str]] = field(default_factory=dict)  # of the followed inputs
    row_wise: str | None = None  # the slicing a row-wise model is maintained by (history's words)
    not_maintained: str | None = None  # why a model read row-wise is not maintained so
    grouped_for: GroupedFor | None = None  # a plain model's figures by a partitioned reader's partitions

    def build(self) -> Built:
        target, session, context = self.target, self.session, self.context
        table_name = target.table_name
        query = target.compiled.bound(self.relation)
        with as_build_error(target.model):
            session.create_snapshot(table_name, query)
        checkpoint("snapshot_created")
        check_pins(session, target.model, table_name)
        checkpoint("pins_checked")
        figures = self._figures()
        content, key_figures = self._content(figures)
        # An incremental model's state carries its watermark and code: a full build always registers,
        # unless the model is volatile: then every build is full and no delta reads that state.
        # A partitioned state's figures describe inputs that give its rows: equal rows, same code,
        # and it stays (its figures are older than the inputs, so later builds recompute more, never less).
        if context is None or volatile_calls(target.model):
            kept: tuple[SnapshotRecord | None, ...] = (self.current, self.existing)
        else:
            kept = self._partition_cutoff()
        for same in kept:
            if same is not None and same.content_hash == content.fingerprint and self.is_state_present(same):
                session.drop_snapshot(table_name)
                return Built(same, CUTOFF, is_new=False)
        detail, watermark = self._state_detail(content, figures, key_figures)
        if self.replaced:
            detail[REPLACED_SOURCES] = list(self.replaced)
        detail.update(unique_checked(target.model))
        outcome: dict[str, object] = {}
        if self.not_maintained is not None and self.current is not None:
            outcome["full_reason"] = self.not_maintained
        return Built(full_record(target, content, detail, watermark), FULL, outcome)

    def _content(self, figures: SliceFigures | None) -> tuple[Content, KeyFigures | None]:
        """The new snapshot's content and, for an upsert whose state records them, its key-and-cdc
        figures (`full_key_sum`), read in the same scan where the backend can."""
        session, relation = self.session, snapshot_table(self.target.table_name)
        if figures is not None:
            return figures.content(session.describe(relation)), None
        if self.context is None or not self._records_watermark():
            if self.grouped_for is not None:
                return self._content_by_reader_partitions(self.grouped_for), None
            return session.content(relation), None
        described = session.describe(relation)
        key_columns = key_cdc_columns(self.target.model, described)
        if key_columns is None:
            return session.content(relation, columns=described), None
        keys = self.target.model.properties.merge_keys or ()
        with as_build_error(self.target.model):
            content, key_sum, bounds = session.content_and_key_figures(relation, key_columns, keys)
        return content, (key_sum, bounds)

    def _content_by_reader_partitions(self, grouped_for: GroupedFor) -> Content:
        """The content as the sum of the rows' figures by the reader's partitions, which the reader
        takes instead of reading the same rows again."""
        key, take = grouped_for
        relation = snapshot_table(self.target.table_name)
        with as_build_error(self.target.model):
            groups = self.session.content_by_group(relation, key)
        take(groups)
        return Content(
            self.session.describe(relation),
            sum(count for count, _ in groups.values()),
            str(sum(int(hash_sum) for _, hash_sum in groups.values())),
        )

    def _records_watermark(self) -> bool:
        """Whether the new state is an incremental model's plain one (watermark, key sums), not a
        partitioned one nor one following its input models' segments."""
        followed = self.followed
        return not self.is_partitioned and not (followed is not None and followed.spec is None)

    def _state_detail(
        self, content: Content, figures: SliceFigures | None, key_figures: KeyFigures | None = None
    ) -> tuple[dict[str, object], object | None]:
        """What the new state records for its next build, and its watermark."""
        context, followed = self.context, self.followed
        columns = [list(column) for column in content.columns]
        detail: dict[str, object] = {}
        watermark = None
        if context is not None and followed is not None and followed.spec is None:
            detail = appended_detail(dict(self.identities), followed.inputs, dict(self.upstream_segments))
            detail["columns"] = columns
            detail = self._with_row_wise(detail)
        elif context is not None and self.is_partitioned:
            with as_build_error(self.target.model):
                if followed is not None and self.is_sliced:
                    detail = sliced_detail(context, dict(self.identities), dict(self.upstream_segments))
                else:
                    detail = partitions.full_detail(context, dict(self.identities))
                if followed is not None:
                    detail[UPSTREAM_SEGMENTS] = dict(self.upstream_segments)
                detail["columns"] = columns
                if figures is not None:
                    detail[FIGURES] = figures.as_detail()
            detail = self._with_row_wise(detail)
        elif context is not None:
            with as_build_error(self.target.model):
                detail = full_detail(context)
                detail["columns"] = columns
                detail.update(full_key_sum(context, self.target.table_name, content.columns, key_figures))
                watermark = detail.get("high")
                if watermark is None and detail.get("cdc_type") is None:
                    output = snapshot_table(self.target.table_name)
                    watermark, cdc_type = output_watermark(context, output)
                    detail["cdc_type"] = cdc_type
                    detail.update(full_output_facts(context, output, watermark, cdc_type))
        return detail, watermark

    def _with_row_wise(self, detail: dict[str, object]) -> dict[str, object]:
        return {**detail, ROW_WISE: self.row_wise} if self.row_wise is not None else detail

    def _figures(self) -> SliceFigures | None:
        """What a full build of a day- or month-partitioned model records of its rows for its next
        builds and its followers (engine.builds.state_figures): the scan that counts and hashes them."""
        context = self.context
        if context is None or not self.is_partitioned or volatile_calls(self.target.model):
            return None
        if partitions.partition_grain(context) not in RECORDED_GRAINS:
            return None
        with as_build_error(self.target.model):
            return partitions.measure_figures(context, snapshot_table(self.target.table_name))

    def _partition_cutoff(self) -> tuple[SnapshotRecord, ...]:
        """The live state a full build of a partitioned model may keep when its rows are equal."""
        current = self.current
        if not self.is_partitioned or self.is_refresh or current is None:
            return ()
        return (current,) if current.model_fingerprint == self.target.fingerprint else ()


def full_record(
    target: Target, content: Content, detail: dict[str, object], watermark: object | None = None
) -> SnapshotRecord:
    """The record of a new whole snapshot, its figures `content`."""
    return SnapshotRecord(
        snapshot_id=target.snapshot_id,
        model=target.model.name,
        table_name=target.table_name,
        partition_key=UNPARTITIONED,
        model_fingerprint=target.fingerprint,
        content_hash=content.fingerprint,
        row_count=content.row_count,
        watermark=str(watermark) if watermark is not None else None,
        created_entry=target.entry,
        row_hash_sum=content.row_hash_sum,
        detail=detail,
    )
