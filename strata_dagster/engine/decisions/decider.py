"""The decider: what the run does with each model, from what the scope read, writing nothing.

For a model whose upstream contents are known it computes the build key and looks for a present
snapshot that has it (reuse), or says why and how the model is rebuilt: the strategy (which kind of
build), and for an incremental model the reason it is built in full before any delta is tried.
`strata run` calls it model by model, in dependency order, after each model's upstream has built
(early cutoff makes a key depend on the upstream's outcome); `strata plan` calls it with the
contents each upstream may come out with.
"""

from __future__ import annotations

from collections.abc import Mapping

from strata_dagster.backends.duckdb.snapshot_files import FileDamage
from strata_dagster.compile.determinism import effective_refresh, volatile_calls
from strata_dagster.engine.builds.model_slices import ModelSlices
from strata_dagster.engine.builds.row_wise import ROW_WISE, RowWise
from strata_dagster.engine.decisions.definition import KeyChoice, ModelDecision
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.paths import REPLACED_SOURCES, StrategyName
from strata_dagster.fingerprint import build_key
from strata_dagster.fingerprint.refresh import refresh_period
from strata_dagster.state.history import SnapshotRecord, detail_file_problem
from strata_dagster.state.states import state_tables


def replaced_reason(now: list[str], before: list[str]) -> str:
    """Why an incremental model rebuilds fully around a correction: its recorded watermark and
    figures were read from other rows than the ones the model reads now."""
    if now:
        names = ", ".join(f"`{name}`" for name in now)
        verb = "is" if len(now) == 1 else "are"
        return f"{names} {verb} read through an override with other rows: a delta against the last build does not apply"
    names = ", ".join(f"`{name}`" for name in before)
    return f"the last build read {names} through an override: a delta against it does not apply"


class Decider:
    """Decides each model of a run's scope; reads history and the catalog, never writes."""

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope
        # model -> the damaged files of a state of it found (the run does not build on that state)
        self.damaged: dict[str, list[FileDamage]] = {}
        # source -> its fingerprint at the latest entry that read it (engine.decisions: reuse)
        self._observed: dict[str, str | None] = {}

    def decide(self, name: str, upstream: Mapping[str, str]) -> ModelDecision:
        """What the run does with model `name`, given the content identity each of its upstream
        models has in this run (`upstream`)."""
        current = self.current_state(name)
        return self.decision(name, current, self.key_choice(name, current, upstream))

    def decision(self, name: str, current: SnapshotRecord | None, choice: KeyChoice) -> ModelDecision:
        """What the run does with model `name`, building on `current`, once its build key is chosen."""
        if choice.is_reused:
            assert choice.existing is not None
            publishes_again = not self.is_live(name, choice.existing, current)
            return ModelDecision(name, choice, current, publishes_again=publishes_again)
        reason = self.full_reason(name, current)
        return ModelDecision(name, choice, current, self.strategy(name, reason), reason)

    # -- the state a model builds on ----------------------------------------------------------------
    def current_state(self, name: str) -> SnapshotRecord | None:
        """The state the branch's live view of `name` shows, if it is there to build on."""
        current_ids = self.scope.pointers.get(name)
        reader = self.scope.reader
        current = reader.snapshot(current_ids[-1]) if current_ids else None
        if current is not None and not self.is_state_present(current):
            return None  # a table of the live state is gone: nothing to build on
        return None if current is None else reader.with_kept_facts(current, self.scope.context.branch)

    def is_state_present(self, record: SnapshotRecord | None) -> bool:
        """Whether every snapshot of the state is there to read: its views, and their files whole
        (a file removed or damaged by hand makes the state absent: rebuilt, never kept or reused)."""
        if record is None:
            return False
        scope = self.scope
        segments = scope.segments(record)
        if not all(segment.table in scope.catalog.snapshot_tables for segment in segments):
            return False
        damaged = scope.session.damaged_files(state_tables(scope.reader, record))
        detail_problem = detail_file_problem(record)
        if detail_problem is not None:  # its figures are gone: nothing to build on, though its rows read
            damaged = [*damaged, FileDamage(record.snapshot_id, *detail_problem)]
        if damaged:
            self.damaged.setdefault(record.model, damaged)
        return not damaged

    def is_live(self, name: str, chosen: SnapshotRecord, current: SnapshotRecord | None) -> bool:
        """Whether the live view already exposes `chosen` (else the run publishes it)."""
        return (
            current is not None
            and chosen.snapshot_id == current.snapshot_id
            and self.scope.catalog.view_tables(name) == state_tables(self.scope.reader, chosen)
        )

    # -- reuse --------------------------------------------------------------------------------------
    def key_choice(self, name: str, current: SnapshotRecord | None, upstream: Mapping[str, str]) -> KeyChoice:
        """The build key of `name` given its upstream models' contents (`upstream`), whether a
        snapshot has it, and whether the run rebuilds the model anyway: what `run` and `plan` decide on."""
        scope = self.scope
        model = scope.project.models[name]
        fingerprint = scope.fingerprints[name]
        inputs = tuple(
            (f"source:{ref}", scope.source_identity(name, ref))
            if ref in scope.sources
            else (f"model:{ref}", upstream[ref])
            for ref in model.references
        )
        merge_state = current.snapshot_id if scope.is_incremental(name) and current is not None else None
        # A model whose rows depend on the clock: reused within its refresh period, or never.
        refresh = effective_refresh(model)
        period = refresh_period(refresh, scope.now)
        key = build_key(fingerprint, list(inputs), merge_state=merge_state, period=period).value
        existing = scope.reader.snapshot_for_build_key(key)
        if existing is not None and not self.is_state_present(existing):
            existing = None  # a table was removed behind our back: rebuild
        if existing is not None and self.has_returned_change_figures(name):
            existing = None
        request = scope.request
        is_forced = (
            ((not request.only_stale or request.full_refresh) and name in scope.selected)
            or refresh == "always"
            or name in scope.requested
        )
        return KeyChoice(key, inputs, existing, is_forced, refresh, period)

    def has_returned_change_figures(self, name: str) -> bool:
        """Whether a source `name` reads by its change column (`cdc`: a row count and the column's
        range, not a hash of its rows) shows figures other than at its latest reading, yet ones a
        recorded build key has: the same figures as an earlier reading over other rows. The cdc
        contract excludes that (after a delete, a row stamped at the newest stamp instead of above
        it), and a snapshot built from the earlier rows would be reused as if they were these; the
        model is built instead, and its delta finds the rows written at or below its watermark."""
        scope = self.scope
        for ref in scope.project.models[name].references:
            state = scope.sources.get(ref)
            if state is None or not state.row_basis:
                continue
            if ref not in self._observed:
                self._observed[ref] = scope.reader.last_observed(ref, state.relation)
            observed = self._observed[ref]
            if observed is not None and observed != state.fingerprint:
                return True
        return False

    # -- how a rebuilt model is built ---------------------------------------------------------------
    def strategy(self, name: str, full_reason: str | None) -> StrategyName:
        """Which kind of build rebuilds `name` (engine.decisions.dispatch builds it)."""
        scope = self.scope
        if scope.project.models[name].properties.is_view:
            return "view"
        if scope.sliding_source_of(name) is not None:
            return "sliding_window"
        if not scope.is_incremental(name) or full_reason is not None:
            return "full"
        if name in scope.requested:
            return "requested"
        followed = scope.followed.get(name)
        if followed is not None:
            return "appended" if followed.spec is None else "sliced"
        return "partitions" if scope.is_partitioned(name) else "delta"

    def full_reason(self, name: str, current: SnapshotRecord | None) -> str | None:
        """Why an incremental model is built in full before any delta is tried (None: a delta is
        tried; None too for the other models, which build in full anyway)."""
        scope = self.scope
        if scope.project.models[name].properties.is_view or scope.sliding_source_of(name) is not None:
            return None
        if not scope.is_incremental(name):
            return None
        if current is None:
            return "first build"
        return self.full_reason_before_delta(name, current)

    def full_reason_before_delta(self, name: str, current: SnapshotRecord) -> str | None:
        """Why an incremental model with a live state is built in full before any delta is tried."""
        scope = self.scope
        if scope.is_refreshed(name):
            return "full refresh requested"
        if volatile_calls(scope.project.models[name]):
            # Rows kept from an earlier build were computed at another time than a full build now.
            return "the model calls a volatile function (now(), random(), ...): a delta would keep stale rows"
        replaced = scope.replaced_sources(name)
        if replaced or current.detail.get(REPLACED_SOURCES):
            return replaced_reason(replaced, current.detail.get(REPLACED_SOURCES) or [])
        maintained = scope.row_wise.get(name)
        if isinstance(maintained, (RowWise, ModelSlices)) and current.detail.get(ROW_WISE) != maintained.text:
            return f"the last build was not maintained row-wise by `{maintained.text}`"
        return self.restarted_ledger(name)

    def restarted_ledger(self, name: str) -> str | None:
        """Why a model reading a business-versioned source whose ledger starts anew rebuilds fully;
        None for a partitioned model, whose changed partitions are found from the evidence."""
        scope = self.scope
        if scope.is_partitioned(name):
            return None
        for ref in scope.project.models[name].references:
            reading = scope.business.get(ref)
            if reading is not None and reading.reset_reason is not None:
                return f"source `{ref}` starts a new partition ledger ({reading.reset_reason})"
            if reading is not None and reading.expired:
                return f"partitions of `{ref}` expired ({', '.join(reading.expired)}): their rows leave the model"
        return None
