"""`strata run`: build the selection on immutable snapshots and publish it in one transaction.

Every decision comes from content: a model whose build key (definition + input contents) already
has a snapshot reuses it; a rebuilt model whose rows equal its current snapshot keeps that
snapshot (early cutoff), so nothing downstream rebuilds for its sake. Snapshot tables, pins,
view pointers and history are all written in ONE DuckDB transaction: a crash at any instant leaves
the last published state, and the next run starts clean.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlglot import exp

from strata_dagster.backends.base import FileDamage, ResourceLimitExceeded, Session, WarehouseError
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.determinism import effective_refresh, volatile_calls
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine import business, partitions, sliding_window
from strata_dagster.engine.context import ProjectContext, load_context
from strata_dagster.engine.damaged_files import rebuilt_reason
from strata_dagster.engine.decisions.decider import REPLACED_SOURCES, Decider
from strata_dagster.engine.decisions.definition import ModelDecision
from strata_dagster.engine.decisions.dispatch import delta_builder
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.incremental import (
    DeltaBuild,
    Fallback,
    IncrementalContext,
    SchemaChanged,
    full_detail,
    full_key_sum,
    full_output_facts,
    output_watermark,
)
from strata_dagster.engine.limits import limit_error, limits_as_errors
from strata_dagster.engine.listing_prefetch import listed_while_opening
from strata_dagster.engine.model_slices import (
    appended_detail,
    sliced_detail,
)
from strata_dagster.engine.new_warehouse import refuse_new_warehouse_without_sources
from strata_dagster.engine.partition_range import (
    REQUESTED_PARTITIONS,
)
from strata_dagster.engine.partitions import UPSTREAM_SEGMENTS
from strata_dagster.engine.paths import CUTOFF, DELTA, FULL, PARTITIONS, REUSED, UNPARTITIONED, VIEW
from strata_dagster.engine.row_wise import NOT_ROW_WISE
from strata_dagster.engine.state_figures import FIGURES, RECORDED_GRAINS, SliceFigures
from strata_dagster.errors import E_BUILD, E_CONTRACT, E_UNIQUE, StrataError
from strata_dagster.faults import checkpoint
from strata_dagster.fingerprint import ModelFingerprint, build_key, digest, short_id, view_identity
from strata_dagster.language import load_project
from strata_dagster.sql.content import Content
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import keyed_rows
from strata_dagster.sql.views import PinViolation, snapshot_table_name
from strata_dagster.state.history import MATERIALIZE_KEY, READS_KEY, EntryModel, SnapshotRecord
from strata_dagster.state.states import merge_keys_of, state_query
from strata_dagster.warehouse.connection import check_warehouse_path
from strata_dagster.warehouse.engines import current_engine, engine_label

NOTHING_TO_DO = "everything up to date (nothing to do)"

# A state's detail key: the `unique` columns its rows were checked to be unique by.
UNIQUE_CHECKED = "unique_checked"


@dataclass(frozen=True)
class RunRequest:
    project_dir: Path
    warehouse: Path
    models: tuple[str, ...] = ()
    branch: str = DEFAULT_BRANCH
    overrides: Mapping[str, str] = field(default_factory=dict)
    only_stale: bool = False
    # Rebuild the selected models from all their input, also incremental and partitioned ones.
    full_refresh: bool = False
    kind: str = "run"
    backfill_of: str | None = None
    reason: str | None = None
    # The run's clock (UTC) for `refresh:` periods; None reads the system clock.
    now: dt.datetime | None = None
    # `--partitions` items (2026-01-05, 2026-01, a..b): rebuild exactly these partitions of the
    # selected partitioned models of their grain (engine.partition_range).
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelOutcome:
    model: str
    path: str
    snapshot_id: str
    table_name: str
    rows: int
    duration_ms: float
    is_published: bool
    sql: str
    detail: dict[str, object] = field(default_factory=dict)  # window, rows read/merged, full_reason
    is_view: bool = False  # a view model's snapshot: `rows` is not counted


@dataclass(frozen=True)
class RunResult:
    run_id: str | None
    entry: int | None
    outcomes: tuple[ModelOutcome, ...]
    branch: str
    # Models with a live view on the branch that the project no longer defines (engine/removed.py).
    removed: tuple[str, ...] = ()
    # Models rebuilt because a snapshot file of their state could not be read (engine/damaged_files.py).
    rebuilt_damaged: Mapping[str, tuple[FileDamage, ...]] = field(default_factory=dict)

    @property
    def is_noop(self) -> bool:
        return self.entry is None

    def outcome(self, model: str) -> ModelOutcome:
        return next(outcome for outcome in self.outcomes if outcome.model == model)


ProgressCallback = Callable[[ModelOutcome], None]


def _new_segment(record: SnapshotRecord) -> str:
    """The segment a delta build wrote: the state's last, or, when the build compacted the state,
    the delta segment kept beside the new base (every row the base holds besides it was checked
    by the builds before)."""
    return str(record.detail.get("compacted_delta") or record.table_name)


def run(request: RunRequest, progress: ProgressCallback | None = None) -> RunResult:
    """Build and publish. Raises StrataError (nothing published) on any failure."""
    with opened_project(request) as (session, context):
        return _Run(session, context, request, progress).execute()


@contextmanager
def opened_project(
    request: RunRequest, *, read_only: bool = False, timeout: float | None = None
) -> Iterator[tuple[Session, ProjectContext]]:
    """The warehouse opened (read-only: nothing migrated or written) and the project compiled
    against it; its business-versioned file sources are listed meanwhile (engine.listing_prefetch)."""
    project = load_project(request.project_dir)
    check_warehouse_path(request.warehouse, is_file=current_engine().is_duckdb)
    if not read_only:
        refuse_new_warehouse_without_sources(project, request.warehouse, request.models, request.overrides)
    with (
        listed_while_opening(
            project, request.warehouse, request.overrides, is_full_refresh=request.full_refresh
        ) as listings,
        open_session(request.warehouse, read_only=read_only, timeout=timeout) as session,
    ):
        if not read_only:
            checkpoint("migrated")
        context = load_context(
            session,
            request.project_dir,
            request.overrides,
            request.branch,
            project=project,
            listings=listings,
        )
        yield session, context


class _Run:
    def __init__(
        self,
        session: Session,
        context: ProjectContext,
        request: RunRequest,
        progress: ProgressCallback | None,
    ) -> None:
        self.session = session
        self.context = context
        self.request = request
        self.progress = progress
        self.scope = RunScope(session, context, request)
        self.decider = Decider(self.scope)
        self.reader = session.history
        self.writer = session.writer
        self.project = context.project
        self.outcomes: list[ModelOutcome] = []
        self.new_snapshots: list[SnapshotRecord] = []
        self.new_keys: list[tuple[str, str]] = []
        self.entry_models: list[EntryModel] = []
        self.to_publish: dict[str, SnapshotRecord] = {}
        self.partial_states: set[str] = set()  # models whose new state rebuilt only requested partitions

    def execute(self) -> RunResult:
        started = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        # Checked before the transaction: a failed probe of the data must not abort it.
        self.scope.read_requested()
        self.session.begin()
        self.reader.remember_snapshots(True)
        try:
            checkpoint("transaction_started")
            self.scope.read()
            pointers = self.scope.read_pointers()
            removed = self.scope.removed
            self.reader.prefetch_snapshots(
                [id_ for name in self.scope.closure for id_ in pointers.get(name, ())]
            )
            for name in self.scope.closure:
                self._decide(name)
            # A cutoff is work done: its build key is recorded so the next run reuses it.
            # Partitions asked for by name are rebuilt and recorded, equal rows or not.
            is_noop = self.request.only_stale and not (
                self.new_snapshots or self.to_publish or self.new_keys or self.scope.requested
            )
            if is_noop:
                self.session.rollback()
                return RunResult(
                    None, None, tuple(self.outcomes), self.context.branch, removed, self._rebuilt_damaged()
                )
            self._render_reused_sql()
            run_id = self._run_id(pointers)
            self._publish(run_id, started)
            self.session.commit()
        except BaseException:
            self.session.rollback()
            raise
        finally:
            self.reader.remember_snapshots(False)
        checkpoint("committed")
        return RunResult(
            run_id,
            self.scope.entry,
            tuple(self.outcomes),
            self.context.branch,
            removed,
            self._rebuilt_damaged(),
        )

    def _rebuilt_damaged(self) -> dict[str, tuple[FileDamage, ...]]:
        built = {outcome.model for outcome in self.outcomes if outcome.path != REUSED}
        return {name: tuple(found) for name, found in self.decider.damaged.items() if name in built}

    def _render_reused_sql(self) -> None:
        """The SQL of the models this run reused, for its history entry."""
        for index, item in enumerate(self.entry_models):
            if item.path == REUSED and not item.sql:
                sql = self.context.compiled.models[item.model].sql(self.scope.relation_for_build)
                self.entry_models[index] = replace(item, sql=sql)
                self.outcomes = [
                    replace(outcome, sql=sql) if outcome.model == item.model else outcome
                    for outcome in self.outcomes
                ]

    # -- inputs -----------------------------------------------------------------------------------

    # -- decisions --------------------------------------------------------------------------------
    def _decide(self, name: str) -> None:
        model = self.project.models[name]
        compiled = self.context.compiled.models[name]
        fingerprint = self.scope.fingerprints[name]
        chosen_now = self.scope.chosen
        upstream = {ref: chosen_now[ref].content_hash for ref in model.references if ref in chosen_now}
        decision = self.decider.decide(name, upstream)
        choice, current = decision.choice, decision.live
        key, inputs, existing, refresh, period = (
            choice.key,
            list(choice.inputs),
            choice.existing,
            choice.refresh,
            choice.period,
        )
        is_incremental = self.scope.is_incremental(name)
        started = time.perf_counter()
        detail: dict[str, object] = {}
        if decision.is_reused:
            assert existing is not None
            chosen, path = existing, REUSED
        else:
            with limits_as_errors(name, model.location):
                chosen, path, detail = self._build(decision, fingerprint)
            if name in self.decider.damaged and current is None:
                detail = {**detail, "full_reason": rebuilt_reason(self.decider.damaged[name])}
            if refresh is not None:
                detail = {**detail, "refresh": refresh, **({"period": period} if period else {})}
            if name in self.scope.requested:
                detail = {**detail, REQUESTED_PARTITIONS: list(self.scope.requested[name])}
            if is_incremental and path != CUTOFF and name not in self.partial_states:
                # Building on the new state with these same inputs gives that state again.
                again = build_key(fingerprint, inputs, merge_state=chosen.snapshot_id, period=period).value
                self.new_keys.append((again, chosen.snapshot_id))
        versions = {
            ref: self.scope.business[ref].version() for ref in model.references if ref in self.scope.business
        }
        if versions:
            detail = {**detail, business.SOURCE_VERSIONS: versions}
        self.scope.chosen[name] = chosen
        is_published = (
            decision.publishes_again
            if decision.is_reused
            else not self.decider.is_live(name, chosen, current)
        )
        if is_published:
            self.to_publish[name] = chosen
        duration = (time.perf_counter() - started) * 1000
        # What history shows as the build's SQL: a delta's own statement, else the model's.
        segment_sql = detail.get("segment_sql") if path in (DELTA, PARTITIONS) else None
        if segment_sql is not None:
            sql = str(segment_sql)
        elif path == REUSED:
            sql = ""  # rendered only when the run records history (a no-op run records nothing)
        else:
            sql = compiled.sql(self.scope.relation_for_build)
        self.entry_models.append(
            EntryModel(
                name,
                decision.partition,
                chosen.snapshot_id,
                key,
                path,
                chosen.row_count,
                duration,
                sql,
                detail,
            )
        )
        outcome = ModelOutcome(
            name,
            path,
            chosen.snapshot_id,
            chosen.table_name,
            chosen.row_count,
            duration,
            is_published,
            sql,
            detail,
            chosen.is_view,
        )
        self.outcomes.append(outcome)
        if self.progress is not None:
            self.progress(outcome)

    def _new_snapshot_id(self, key: str) -> str:
        snapshot_id = short_id(key)
        if self.reader.snapshot(snapshot_id) is not None:
            # Rebuilding a key whose snapshot table went missing: a fresh id, never a second record.
            snapshot_id = short_id(digest(key, self.scope.entry))
        return snapshot_id

    def _build(
        self, decision: ModelDecision, fingerprint: ModelFingerprint
    ) -> tuple[SnapshotRecord, str, dict[str, object]]:
        name, key = decision.model, decision.choice.key
        current, existing = decision.live, decision.choice.existing
        model = self.project.models[name]
        snapshot_id = self._new_snapshot_id(key)
        table_name = snapshot_table_name(snapshot_id, name)
        if model.properties.is_view:
            record, path = self._view(name, key, snapshot_id, table_name, fingerprint, current, existing)
            return record, path, {}
        window = self.scope.sliding_source_of(name)
        if window is not None:
            return self._build_over_window(name, key, window, snapshot_id, table_name, fingerprint, current)
        maintained = self.scope.row_wise.get(name)
        if self.scope.is_incremental(name):
            context = self.scope.incremental_context(name, snapshot_id, table_name)
            replaced = self.scope.replaced_sources(name)
            reason = decision.full_reason
            if current is not None and reason is None:
                outcome = self._delta(self.scope.narrowed(context, current), current)
                if isinstance(outcome, DeltaBuild):
                    record, path, detail = self._accept_delta(
                        name, key, outcome, PARTITIONS if self.scope.is_partitioned(name) else DELTA
                    )
                    return record, path, self.scope.row_wise_detail(name, detail)
                reason = outcome.reason
            record, path = self._full(
                name, key, snapshot_id, table_name, fingerprint, current, existing, context, replaced
            )
            return record, path, self.scope.row_wise_detail(name, {"full_reason": reason})
        record, path = self._full(name, key, snapshot_id, table_name, fingerprint, current, existing, None)
        if isinstance(maintained, str) and current is not None and path == FULL:
            return record, path, {"full_reason": f"{NOT_ROW_WISE}: {maintained}"}
        return record, path, {}

    # -- sliding_window(N) sources (engine.sliding_window) ------------------------------------------

    def _build_over_window(
        self,
        name: str,
        key: str,
        source: str,
        snapshot_id: str,
        table_name: str,
        fingerprint: ModelFingerprint,
        current: SnapshotRecord | None,
    ) -> tuple[SnapshotRecord, str, dict[str, object]]:
        """A model over a sliding-window source: an aggregate kept from the window's weighted delta,
        any other shape built in full (and why)."""
        compiled = self.context.compiled.models[name]
        reading = self.scope.business[source]
        shape = sliding_window.shape_of(compiled, source)
        if isinstance(shape, str) or self.scope.is_partitioned(name):
            reason = (
                shape
                if isinstance(shape, str)
                else f"a partitioned model over `{source}` builds in full over the window"
            )
            reason = f"`{source}` is a sliding window: {reason}"
            record, path = self._full(name, key, snapshot_id, table_name, fingerprint, current, None, None)
            return record, path, {"full_reason": reason}
        maintained = sliding_window.WindowAggregate(
            self.session,
            compiled,
            shape,
            self.scope.relation_for_build,
            source,
            reading.window,
            reading.columns,
            reading.partitions_relation,
        )
        reason = "first build" if current is None else None
        if self.scope.is_refreshed(name):
            reason = "full refresh requested"
        elif reading.reset_reason is not None:
            reason = f"source `{source}` starts a new partition ledger ({reading.reset_reason})"
        elif current is not None:
            consumed = {item.key for item in reading.consumed}
            reason = maintained.precheck(
                current, fingerprint.value, consumed, self.scope.catalog.snapshot_tables
            )
        if reason is None:
            assert current is not None
            with self._as_build_error(name):
                build = maintained.delta(current, snapshot_id, table_name, self.scope.entry)
            if isinstance(build, DeltaBuild):
                return self._accept_delta(name, key, build, DELTA)
            reason = build.reason
        with self._as_build_error(name):
            self.session.create_snapshot(table_name, compiled.bound(self.scope.relation_for_build))
            self._check_pins(name, table_name)
            maintained.full(table_name)
            content = self.session.content(snapshot_table(table_name))
        record = self._register_full(
            name,
            key,
            snapshot_id,
            table_name,
            fingerprint,
            content,
            maintained.detail(table_name, content.columns),
        )
        return record, FULL, {"full_reason": reason}

    def _delta(self, context: IncrementalContext, current: SnapshotRecord) -> DeltaBuild | Fallback:
        name = context.model.name
        try:
            with self._as_build_error(name):
                return delta_builder(self.scope, name, context, current).build()
        except SchemaChanged:
            return Fallback("the delta's columns differ from the previous state's")

    def _accept_delta(
        self, name: str, key: str, build: DeltaBuild, path: str
    ) -> tuple[SnapshotRecord, str, dict[str, object]]:
        # A state that rebuilt only the requested partitions is not what these inputs give: no key.
        is_partial = name in self.scope.requested
        if is_partial:
            self.partial_states.add(name)
        if build.is_unchanged:
            if not is_partial:
                self.new_keys.append((key, build.record.snapshot_id))
            return build.record, CUTOFF, build.detail
        record = build.record
        checkpoint("snapshot_created")
        self._check_delta_pins(name, record)
        checkpoint("pins_checked")
        record = replace(record, detail={**record.detail, **self._unique_checked(name)})
        self.new_snapshots.append(record)
        if not is_partial:
            self.new_keys.append((key, record.snapshot_id))
        return record, path, build.detail

    @contextmanager
    def _as_build_error(self, name: str) -> Iterator[None]:
        try:
            yield
        except ResourceLimitExceeded as error:
            raise limit_error(name, error, self.project.models[name].location) from None
        except WarehouseError as error:
            raise StrataError(
                E_BUILD,
                f"{engine_label()} rejected model `{name}`: {error}",
                self.project.models[name].location,
                hint=f"run `strata compile PROJECT --model {name}` to see the SQL; `strata check PROJECT` "
                "names the step when DuckDB refuses the SQL itself (not a value in the data)",
            ) from None

    def _full(
        self,
        name: str,
        key: str,
        snapshot_id: str,
        table_name: str,
        fingerprint: ModelFingerprint,
        current: SnapshotRecord | None,
        existing: SnapshotRecord | None,
        incremental: IncrementalContext | None,
        replaced: list[str] | None = None,
    ) -> tuple[SnapshotRecord, str]:
        query = self.context.compiled.models[name].bound(self.scope.relation_for_build)
        with self._as_build_error(name):
            self.session.create_snapshot(table_name, query)
        checkpoint("snapshot_created")
        self._check_pins(name, table_name)
        checkpoint("pins_checked")
        figures = self._full_figures(name, incremental, table_name)
        content = (
            self.session.content(snapshot_table(table_name))
            if figures is None
            else figures.content(self.session.describe(snapshot_table(table_name)))
        )
        # An incremental model's state carries its watermark and code: a full build always registers,
        # unless the model is volatile: then every build is full and no delta reads that state.
        # A partitioned state's figures describe inputs that give its rows: equal rows, same code,
        # and it stays (its figures are older than the inputs, so later builds recompute more, never less).
        if incremental is None or volatile_calls(self.project.models[name]):
            kept: tuple[SnapshotRecord | None, ...] = (current, existing)
        else:
            kept = self._partition_cutoff(name, fingerprint, current)
        for same in kept:
            if (
                same is not None
                and same.content_hash == content.fingerprint
                and self.decider.is_state_present(same)
            ):
                self.session.drop_snapshot(table_name)
                self.new_keys.append((key, same.snapshot_id))
                return same, CUTOFF
        detail: dict[str, object] = {}
        watermark = None
        followed = self.scope.followed.get(name)
        if incremental is not None and followed is not None and followed.spec is None:
            detail = appended_detail(
                self.scope.identities(name), followed.inputs, self.scope.upstream_segments(name)
            )
            detail["columns"] = [list(column) for column in content.columns]
            detail = self.scope.row_wise_detail(name, detail)
        elif incremental is not None and self.scope.is_partitioned(name):
            with self._as_build_error(name):
                if followed is not None and name in self.scope.row_wise:
                    detail = sliced_detail(
                        incremental, self.scope.identities(name), self.scope.upstream_segments(name)
                    )
                else:
                    detail = partitions.full_detail(incremental, self.scope.identities(name))
                if followed is not None:
                    detail[UPSTREAM_SEGMENTS] = self.scope.upstream_segments(name)
                detail["columns"] = [list(column) for column in content.columns]
                if figures is not None:
                    detail[FIGURES] = figures.as_detail()
            detail = self.scope.row_wise_detail(name, detail)
        elif incremental is not None:
            with self._as_build_error(name):
                detail = full_detail(incremental)
                detail["columns"] = [list(column) for column in content.columns]
                detail.update(full_key_sum(incremental, table_name, content.columns))
                watermark = detail.get("high")
                if watermark is None and detail.get("cdc_type") is None:
                    output = snapshot_table(table_name)
                    watermark, detail["cdc_type"] = output_watermark(incremental, output)
                    detail.update(full_output_facts(incremental, output, watermark, detail["cdc_type"]))
        if replaced:
            detail[REPLACED_SOURCES] = replaced
        detail.update(self._unique_checked(name))
        record = self._register_full(
            name, key, snapshot_id, table_name, fingerprint, content, detail, watermark
        )
        return record, FULL

    def _full_figures(
        self, name: str, context: IncrementalContext | None, table_name: str
    ) -> SliceFigures | None:
        """What a full build of a day- or month-partitioned model records of its rows for its next
        builds and its followers (engine.state_figures): the scan that counts and hashes them."""
        if (
            context is None
            or not self.scope.is_partitioned(name)
            or volatile_calls(self.project.models[name])
        ):
            return None
        if partitions.partition_grain(context) not in RECORDED_GRAINS:
            return None
        with self._as_build_error(name):
            return partitions.measure_figures(context, snapshot_table(table_name))

    def _register_full(
        self,
        name: str,
        key: str,
        snapshot_id: str,
        table_name: str,
        fingerprint: ModelFingerprint,
        content: Content,
        detail: dict[str, object],
        watermark: object | None = None,
    ) -> SnapshotRecord:
        """The record of a new whole snapshot of `name`, published by the run under `key`."""
        record = SnapshotRecord(
            snapshot_id=snapshot_id,
            model=name,
            table_name=table_name,
            partition_key=UNPARTITIONED,
            model_fingerprint=fingerprint.value,
            content_hash=content.fingerprint,
            row_count=content.row_count,
            watermark=str(watermark) if watermark is not None else None,
            created_entry=self.scope.entry,
            row_hash_sum=content.row_hash_sum,
            detail=detail,
        )
        self.new_snapshots.append(record)
        self.new_keys.append((key, snapshot_id))
        return record

    def _partition_cutoff(
        self, name: str, fingerprint: ModelFingerprint, current: SnapshotRecord | None
    ) -> tuple[SnapshotRecord, ...]:
        """The live state a full build of a partitioned model may keep when its rows are equal."""
        is_refresh = self.scope.is_refreshed(name)
        if not self.scope.is_partitioned(name) or is_refresh or current is None:
            return ()
        return (current,) if current.model_fingerprint == fingerprint.value else ()

    def _view(
        self,
        name: str,
        key: str,
        snapshot_id: str,
        table_name: str,
        fingerprint: ModelFingerprint,
        current: SnapshotRecord | None,
        existing: SnapshotRecord | None,
    ) -> tuple[SnapshotRecord, str]:
        """A view model's build: a new immutable view over its inputs, whose identity comes from
        the build key (its definition and its inputs' identities), never from hashing its rows."""
        content_hash = view_identity(key)
        if effective_refresh(self.project.models[name]) == "always":
            # Its rows change with the clock while its inputs do not: a new identity every run, so
            # its readers are rebuilt (and cut off when their rows come out equal).
            content_hash = view_identity(digest(key, "entry", self.scope.entry))
        # `--full-refresh` rebuilds the view whatever its identity: the way to repair a broken one.
        is_refresh = self.scope.is_refreshed(name)
        for same in () if is_refresh else (existing, current):
            if same is not None and same.content_hash == content_hash and self.decider.is_state_present(same):
                self._check_contract(name, same.table_name)  # a contract edit does not change the key
                self.new_keys.append((key, same.snapshot_id))
                return same, CUTOFF
        query = self.context.compiled.models[name].bound(self.scope.relation_for_build)
        with self._as_build_error(name):
            self.session.create_view_snapshot(table_name, query)
        checkpoint("snapshot_created")
        self._check_contract(name, table_name)  # `not null` is refused on views: only the schema is read
        reads = sorted(
            {
                segment_id
                for ref in self.project.models[name].references
                if ref in self.scope.chosen
                for segment_id in self.scope.chosen[ref].segment_ids
            }
        )
        record = SnapshotRecord(
            snapshot_id=snapshot_id,
            model=name,
            table_name=table_name,
            partition_key=UNPARTITIONED,
            model_fingerprint=fingerprint.value,
            content_hash=content_hash,
            row_count=0,  # not counted: counting reads every row, which a view exists to avoid
            watermark=None,
            created_entry=self.scope.entry,
            detail={MATERIALIZE_KEY: "view", READS_KEY: reads},
        )
        self.new_snapshots.append(record)
        self.new_keys.append((key, snapshot_id))
        return record, VIEW

    def _check_pins(self, name: str, table_name: str) -> None:
        props = self.project.models[name].properties
        if props.unique:
            self._raise_unique(name, self.session.unique_violation(table_name, props.unique))
        self._check_contract(name, table_name)

    def _check_delta_pins(self, name: str, record: SnapshotRecord) -> None:
        """Pins on a delta. Duplicates need a new row: within the new segment, or against the rows
        it keeps; when the replaced keys (or partitions) are part of the pinned columns, the kept
        rows cannot repeat a new row's value, so the new segment alone is checked."""
        props = self.project.models[name].properties
        segment = _new_segment(record)
        if props.unique:
            self._raise_unique(name, self.session.unique_violation(segment, props.unique))
            replaced = set(merge_keys_of(record))
            is_disjoint = record.detail.get("strategy") in ("upsert", "append_new", "partitions") and bool(
                replaced
            )
            if not (is_disjoint and replaced <= set(props.unique)):
                self._raise_unique(
                    name, self.session.unique_violation(self._pinned_rows(record), props.unique)
                )
        # Columns and types equal the previous state's (checked by the delta): not-null is per row.
        self._check_contract(name, segment)

    def _unique_checked(self, name: str) -> dict[str, object]:
        unique = self.project.models[name].properties.unique
        return {UNIQUE_CHECKED: sorted(unique)} if unique else {}

    def _pinned_rows(self, record: SnapshotRecord) -> exp.Query:
        """The rows of a delta's state a duplicate of the `unique` pin can be among: all of them,
        or, when the state it builds on was checked by the same pin (so the rows it keeps are
        unique among themselves), only those sharing a pinned value with the new segment."""
        state = state_query(self.reader, record)
        unique = sorted(self.project.models[record.model].properties.unique or ())
        ids = record.detail.get("compacted_after") or record.segment_ids[:-1]
        previous = (
            self.reader.snapshot(ids[-1]) if ids and record.segment_ids[-1] == record.snapshot_id else None
        )
        if previous is None or previous.detail.get(UNIQUE_CHECKED) != unique:
            return state
        values = [exp.column(column, table="__state") for column in unique]
        segment = exp.select(*(exp.column(column) for column in unique)).from_(
            snapshot_table(_new_segment(record))
        )
        return (
            exp.select("*").from_(state.subquery("__state")).where(keyed_rows(unique, values, source=segment))
        )

    def _raise_unique(self, name: str, violation: PinViolation | None) -> None:
        if violation is None:
            return
        props = self.project.models[name].properties
        raise StrataError(
            E_UNIQUE,
            f"model `{name}` breaks its `unique` pin: {violation.message}",
            props.location_of("unique") or self.project.models[name].location,
            hint="fix the data or the model; nothing was published",
        )

    def _check_contract(self, name: str, table_name: str) -> None:
        props = self.project.models[name].properties
        if not props.contract:
            return
        contract = [(column.name, column.type, column.is_not_null) for column in props.contract]
        violation = self.session.contract_violation(table_name, contract)
        if violation is not None:
            raise StrataError(
                E_CONTRACT,
                f"model `{name}` breaks its `contract`: {violation.message}",
                props.location_of("contract") or self.project.models[name].location,
                hint="fix the model or the contract; nothing was published",
            )

    # -- publication ------------------------------------------------------------------------------
    def _run_id(self, pointers: Mapping[str, tuple[str, ...]]) -> str:
        """A content id of what the run consumed and of the rows every view of its branch exposes
        after it: equal ids only for equal published contents, so `rollback`, `replay` and
        `backfill` reach every state a run left (a rebuild giving the same rows in a new snapshot
        keeps the id)."""
        return digest(
            "run",
            self.request.kind,
            self.context.branch,
            list(self.scope.selected),
            self.request.only_stale,
            self.request.full_refresh,
            self.request.backfill_of,
            *([sorted(self.scope.requested.items())] if self.scope.requested else []),
            sorted((state.name, state.fingerprint) for state in self.scope.sources.values()),
            sorted((name, fp.value) for name, fp in self.scope.fingerprints.items()),
            self._branch_contents(pointers),
        )

    def _branch_contents(self, pointers: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
        """(model, content identity) of every view of the branch after the run: the run's models
        as built, the others as `pointers` (before the run) have them."""
        contents = {name: record.content_hash for name, record in self.scope.chosen.items()}
        for name, ids in pointers.items():
            if name not in contents and ids:
                head = self.reader.snapshot(ids[-1])
                contents[name] = head.content_hash if head is not None else ",".join(ids)
        return sorted(contents.items())

    def _publish(self, run_id: str, started: dt.datetime) -> None:
        for name, record in self.to_publish.items():
            self.session.point_view_at(self.scope.schema, name, state_query(self.reader, record))
        checkpoint("views_pointed")
        self.writer.add_entry(
            entry=self.scope.entry,
            run_id=run_id,
            kind=self.request.kind,
            branch=self.context.branch,
            started_at=started,
            models=list(self.scope.selected),
            overrides=dict(self.context.overrides),
            backfill_of=self.request.backfill_of,
            reason=self.request.reason,
            detail={
                "only_stale": self.request.only_stale,
                "full_refresh": self.request.full_refresh,
                **({"partitions": list(self.request.partitions)} if self.request.partitions else {}),
                **(
                    {
                        business.SOURCE_VERSIONS: {
                            name: read.version() for name, read in self.scope.business.items()
                        }
                    }
                    if self.scope.business
                    else {}
                ),
            },
        )
        for name, read in self.scope.business.items():
            self.writer.add_ledger(
                self.scope.entry,
                name,
                read.consumed if read.reset_reason else read.new,
                read.reset_reason,
                read.expired,
                read.ledger_digest(),
            )
        for read in self.scope.sources.values():
            self.writer.add_source(
                self.scope.entry,
                read.name,
                UNPARTITIONED,
                read.relation,
                read.fingerprint,
                read.row_count,
                read.row_basis,
            )
        self.writer.add_snapshots(self.new_snapshots)
        self.writer.add_build_keys(self.new_keys, self.scope.entry)
        self.writer.add_entry_models(self.scope.entry, self.entry_models)
        self.writer.add_publications(
            self.scope.entry,
            self.context.branch,
            {name: list(record.segment_ids) for name, record in self.to_publish.items()},
        )
        checkpoint("history_written")


def run_project(
    project_dir: Path | str,
    warehouse: Path | str,
    *,
    models: Iterable[str] = (),
    branch: str = DEFAULT_BRANCH,
    overrides: Mapping[str, str] | None = None,
    only_stale: bool = False,
    full_refresh: bool = False,
    progress: ProgressCallback | None = None,
    now: dt.datetime | None = None,
    partitions: Iterable[str] = (),
) -> RunResult:
    """Convenience wrapper around `run` for Python callers and tests."""
    request = RunRequest(
        project_dir=Path(project_dir),
        warehouse=Path(warehouse),
        models=tuple(models),
        branch=branch,
        overrides=dict(overrides or {}),
        only_stale=only_stale,
        full_refresh=full_refresh,
        now=now,
        partitions=tuple(partitions),
    )
    return run(request, progress)
