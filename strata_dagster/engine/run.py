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
from typing import TYPE_CHECKING

from strata_dagster.backends.base import FileDamage, Session
from strata_dagster.backends.choice import current_backend
from strata_dagster.backends.duckdb.connection import check_warehouse_path
from strata_dagster.backends.iceberg.catalog import setting_for
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.builds.limits import limits_as_errors
from strata_dagster.engine.context import ProjectContext, load_context, parse_cache_dir
from strata_dagster.engine.damaged_files import rebuilt_reason
from strata_dagster.engine.decisions.decider import Decider
from strata_dagster.engine.decisions.definition import ModelDecision, RunRequest
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.listing_prefetch import listed_while_opening
from strata_dagster.engine.paths import CUTOFF, DELTA, PARTITIONS, REUSED
from strata_dagster.engine.sources.new_warehouse import refuse_new_warehouse_without_sources
from strata_dagster.engine.sources.readings import record_stamps
from strata_dagster.faults import checkpoint
from strata_dagster.fingerprint import ModelFingerprint, build_key, digest, short_id
from strata_dagster.language import load_project
from strata_dagster.language.render_memo import forget as forget_renderings
from strata_dagster.language.render_memo import keep, remembered
from strata_dagster.sql.views import snapshot_table_name
from strata_dagster.state.history import EntryModel, SnapshotRecord

if TYPE_CHECKING:
    from strata_dagster.engine.builds.strategy import Built
    from strata_dagster.engine.iceberg_publication import IcebergPublished
    from strata_dagster.engine.publish import Publication

NOTHING_TO_DO = "everything up to date (nothing to do)"


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
    # Models with a live view on the branch that the project no longer defines (engine/decisions/removed.py).
    removed: tuple[str, ...] = ()
    # Models rebuilt because a snapshot file of their state could not be read (engine/damaged_files.py).
    rebuilt_damaged: Mapping[str, tuple[FileDamage, ...]] = field(default_factory=dict)
    # Each live model's Iceberg table after the run (None: publication to Iceberg is off).
    iceberg: IcebergPublished | None = None

    @property
    def is_noop(self) -> bool:
        return self.entry is None

    def outcome(self, model: str) -> ModelOutcome:
        return next(outcome for outcome in self.outcomes if outcome.model == model)


ProgressCallback = Callable[[ModelOutcome], None]


def run(request: RunRequest, progress: ProgressCallback | None = None) -> RunResult:
    """Build and publish. Raises StrataError (nothing published) on any failure."""
    setting_for(request.warehouse)  # a bad STRATA_ICEBERG_CATALOG refused before anything is built
    # Only a run told --only-stale can find nothing to do, and only then are its renderings kept.
    memo_dir = parse_cache_dir(request.warehouse) if request.only_stale else None
    with remembered(memo_dir) as memo:
        with opened_project(request) as (session, context):
            result = _Run(session, context, request, progress).execute()
        if result.is_noop:
            keep(memo)
    return result


@contextmanager
def opened_project(
    request: RunRequest, *, read_only: bool = False, timeout: float | None = None
) -> Iterator[tuple[Session, ProjectContext]]:
    """The warehouse opened (read-only: nothing migrated or written) and the project compiled
    against it; its business-versioned file sources are listed meanwhile (engine.listing_prefetch)."""
    check_warehouse_path(request.warehouse, is_file=current_backend().is_duckdb)
    project = load_project(request.project_dir, parse_cache_dir(request.warehouse))
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
            cache_dir=parse_cache_dir(request.warehouse),
        )
        yield session, context


class _Run:
    """One run: each model of the scope decided, in dependency order, built when it must be,
    then everything published in the run's transaction."""

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
        self.project = context.project
        self.outcomes: list[ModelOutcome] = []
        self.new_snapshots: list[SnapshotRecord] = []
        self.new_keys: list[tuple[str, str]] = []
        self.entry_models: list[EntryModel] = []
        self.to_publish: dict[str, SnapshotRecord] = {}

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
                record_stamps(self.session, self.scope.sources.values())
                latest = self.reader.entry(self.scope.entry - 1)
                return RunResult(
                    None,
                    None,
                    tuple(self.outcomes),
                    self.context.branch,
                    removed,
                    self._rebuilt_damaged(),
                    # Tables a failed or killed publication left behind catch up.
                    self._publish_iceberg(latest.entry, latest.run_id) if latest is not None else None,
                )
            from strata_dagster.engine.publish import publish  # a run that publishes nothing needs none

            self._render_reused_sql()
            publication = self._publication(started)
            run_id = publication.run_id(self.reader, pointers)
            publish(self.session, publication, run_id)
            self.session.commit()
        except BaseException:
            self.session.rollback()
            raise
        finally:
            self.reader.remember_snapshots(False)
        checkpoint("committed")
        record_stamps(self.session, self.scope.sources.values())
        return RunResult(
            run_id,
            publication.entry,
            tuple(self.outcomes),
            self.context.branch,
            removed,
            self._rebuilt_damaged(),
            self._publish_iceberg(publication.entry, run_id),
        )

    def _publish_iceberg(self, entry: int, run_id: str) -> IcebergPublished | None:
        """The branch's tables brought to its views, after the warehouse committed (off: None)."""
        if setting_for(self.request.warehouse) is None:
            return None  # publication to Iceberg off: its machinery is not even imported
        from strata_dagster.engine.iceberg_publication import RunFacts, publish_branch

        facts = RunFacts(
            entry,
            run_id,
            self.request.kind,
            self.request.reason,
            {outcome.model: outcome.path for outcome in self.outcomes},
        )
        return publish_branch(self.session, self.request.warehouse, self.context.branch, self.project, facts)

    def _rebuilt_damaged(self) -> dict[str, tuple[FileDamage, ...]]:
        built = {outcome.model for outcome in self.outcomes if outcome.path != REUSED}
        return {name: tuple(found) for name, found in self.decider.damaged.items() if name in built}

    def _render_reused_sql(self) -> None:
        """The SQL of the models this run reused, for its history entry."""
        for index, item in enumerate(self.entry_models):
            if item.path == REUSED and not item.sql:
                sql = self.context.compiled.models[item.model].sql(self.scope.relations_for(item.model))
                self.entry_models[index] = replace(item, sql=sql)
                self.outcomes = [
                    replace(outcome, sql=sql) if outcome.model == item.model else outcome
                    for outcome in self.outcomes
                ]

    def _publication(self, started: dt.datetime) -> Publication:
        from strata_dagster.engine.publish import Publication

        scope, request = self.scope, self.request
        return Publication(
            entry=scope.entry,
            kind=request.kind,
            branch=self.context.branch,
            schema=scope.schema,
            started_at=started,
            models=scope.selected,
            overrides=self.context.overrides,
            only_stale=request.only_stale,
            full_refresh=request.full_refresh,
            partitions=request.partitions,
            requested=scope.requested,
            backfill_of=request.backfill_of,
            reason=request.reason,
            sources=tuple(scope.sources.values()),
            fingerprints={name: fingerprint.value for name, fingerprint in scope.fingerprints.items()},
            ledgers=scope.business,
            snapshots=tuple(self.new_snapshots),
            keys=tuple(self.new_keys),
            entry_models=tuple(self.entry_models),
            views=self.to_publish,
            chosen=scope.chosen,
        )

    # -- one model ----------------------------------------------------------------------------------
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
                built = self._build(decision, fingerprint)
            chosen, path, detail = built.record, built.path, built.detail
            if name in self.decider.damaged and current is None:
                detail = {**detail, "full_reason": rebuilt_reason(self.decider.damaged[name])}
            if refresh is not None:
                detail = {**detail, "refresh": refresh, **({"period": period} if period else {})}
            if name in self.scope.requested:
                from strata_dagster.engine.builds.partition_range import REQUESTED_PARTITIONS

                detail = {**detail, REQUESTED_PARTITIONS: list(self.scope.requested[name])}
            # A state that rebuilt only the requested partitions is not what these inputs give: no key.
            if is_incremental and path != CUTOFF and not built.is_partial:
                # Building on the new state with these same inputs gives that state again.
                again = build_key(fingerprint, inputs, merge_state=chosen.snapshot_id, period=period).value
                self.new_keys.append((again, chosen.snapshot_id))
        versions = {
            ref: self.scope.business[ref].version() for ref in model.references if ref in self.scope.business
        }
        if versions:
            from strata_dagster.engine.sources.business import SOURCE_VERSIONS

            detail = {**detail, SOURCE_VERSIONS: versions}
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
            sql = compiled.sql(self.scope.relations_for(name))
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

    def _build(self, decision: ModelDecision, fingerprint: ModelFingerprint) -> Built:
        """The model built by the strategy its decision names (engine.decisions.dispatch); what it
        wrote is recorded for the publication."""
        # The strategies are imported when something is built: a run that reuses everything needs none.
        from strata_dagster.engine.builds.strategy import Target
        from strata_dagster.engine.decisions.dispatch import strategy_for

        forget_renderings()  # this run builds: what it renders is never rendered again
        name, key = decision.model, decision.choice.key
        snapshot_id = self._new_snapshot_id(key)
        target = Target(
            self.project.models[name],
            self.context.compiled.models[name],
            key,
            snapshot_id,
            snapshot_table_name(snapshot_id, name),
            fingerprint.value,
            self.scope.entry,
        )
        built = strategy_for(decision, self.scope, target, self.decider.is_state_present).build()
        if built.is_new:
            self.new_snapshots.append(built.record)
        if not built.is_partial:
            self.new_keys.append((key, built.record.snapshot_id))
        return built


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
