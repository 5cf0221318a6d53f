"""`strata plan`: what a run with the same arguments would do, and why, without writing anything.

The planner is the run itself up to its decisions: it reads the sources and the history with the
run's scope (engine.decisions.scope), decides each model with the run's decider
(engine.decisions.decider), and asks the builder the run would use (engine.decisions.dispatch)
for the reason a delta would fall back to full (`precheck`, the window gate) and for the
partitions whose input changed. It opens the warehouse
read-only. What only a build can tell (whether a rebuilt model's rows come out equal, so the live
snapshot stays and its readers are reused) is said as such: a model downstream of a rebuild
"depends on" it, and `allowed` lists every path the run may then take.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from strata_dagster.compile.determinism import volatile_calls
from strata_dagster.engine.builds import sliding_window
from strata_dagster.engine.builds.incremental import DeltaBuilder, Fallback
from strata_dagster.engine.builds.key_buckets import KeyBucketBuild
from strata_dagster.engine.builds.model_slices import AppendedBuilder
from strata_dagster.engine.builds.partitions import (
    PartitionBuild,
    partition_fingerprints,
    partition_grain,
)
from strata_dagster.engine.builds.row_wise import NOT_ROW_WISE
from strata_dagster.engine.builds.table_history import TableHistoryBuilder
from strata_dagster.engine.damaged_files import rebuilt_reason
from strata_dagster.engine.decisions.decider import Decider
from strata_dagster.engine.decisions.definition import KeyChoice, ModelDecision, RunRequest
from strata_dagster.engine.decisions.dispatch import delta_builder
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.paths import (
    CUTOFF,
    CUTOFF_CANDIDATE,
    DELTA,
    DEPENDS,
    FULL,
    PARTITIONS,
    REUSED,
    VIEW,
)
from strata_dagster.engine.reads.explain import partition_ranges
from strata_dagster.engine.run import opened_project
from strata_dagster.sql.segments import KEY_GRAINS
from strata_dagster.state.history import SnapshotRecord

_UNKNOWN = ""  # a content identity only the build will tell
_MAX_SCENARIOS = 64  # upstream outcomes tried for one model; beyond, the plan says "depends"


# What `strata plan` says of a history over a plain table (engine.builds.table_history).
TABLE_HISTORY_NOTE = (
    "a history of a plain table: its versions are stamped with the time each build ran, so it cannot be "
    "recomputed from a log (a full build starts it over); `strata verify` checks that its current versions "
    "are the table's rows now, that valid_from/valid_to are well formed and do not overlap, and that no key "
    "has two current versions"
)


@dataclass(frozen=True)
class InputChange:
    """An input whose identity differs from the one the live snapshot's last build read."""

    name: str  # "source:orders" / "model:stg_orders" / "code"
    old: str | None
    new: str | None  # None: an upstream model rebuilt first, its identity known once built

    def text(self) -> str:
        kind, _, label = self.name.partition(":")
        what = "the model's code" if kind == "code" else f"`{label}`"
        old = self.old[:12] if self.old else "-"
        if self.new is None:
            return f"{what} is rebuilt first (now {old})"
        return f"{what} changed ({old} -> {self.new[:12]})"


@dataclass(frozen=True)
class ModelPlan:
    model: str
    path: str  # reused / cutoff-candidate / full / delta / partitions / view / depends
    allowed: tuple[str, ...]  # the paths `run` may take (history's path names)
    reason: str
    changes: tuple[InputChange, ...] = ()
    depends_on: tuple[str, ...] = ()
    window: tuple[str | None, str | None] | None = None  # (low, high]
    lateness: str | None = None
    partition_keys: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()  # the keys, consecutive ones as ranges `a..b`
    partitions_total: int | None = None
    is_exact: bool = False  # `partition_keys` are exactly the ones the run rebuilds
    rows_to_read: int | None = None
    notes: tuple[str, ...] = ()
    # Reused, but the live view shows another state (after a rollback, a promotion): the run
    # points it back at the reused snapshot.
    publishes_again: bool = False
    # What `partition_keys` are: partitions, or the slices (values of a key column such as
    # `order_id`) a model maintained from its input models' segments is rebuilt by.
    unit: str = "partition"
    unit_column: str | None = None  # the slices' key column

    @property
    def would_build(self) -> bool:
        return self.allowed != (REUSED,)

    @property
    def would_change(self) -> bool:
        return self.would_build or self.publishes_again

    def text(self) -> str:
        """One line in history's words: the reason, what changed, the window and partitions."""
        parts = [self.reason, *(change.text() for change in self.changes)]
        if self.window is not None:
            low, high = self.window
            late = f" re-reading {self.lateness} before low" if self.lateness else ""
            parts.append(f"window ({low or '-inf'}, {high or '-'}]{late}")
        if self.partitions:
            of = f" of {self.partitions_total:,}" if self.partitions_total is not None else ""
            noun = self.unit if len(self.partition_keys) == 1 and not of else f"{self.unit}s"
            noun += f" of {self.unit_column}" if self.unit_column else ""
            parts.append(f"{len(self.partition_keys):,}{of} {noun} to rebuild: {', '.join(self.partitions)}")
        if self.rows_to_read is not None:
            parts.append(f"about {self.rows_to_read:,} rows to read")
        parts.extend(f"note: {note}" for note in self.notes)
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "path": self.path,
            "allowed_paths": list(self.allowed),
            "reason": self.reason,
            "why": self.text(),
            "changes": [
                {"input": change.name, "old": change.old, "new": change.new} for change in self.changes
            ],
            "depends_on": list(self.depends_on),
            "window": None
            if self.window is None
            else {"low": self.window[0], "high": self.window[1], "lateness": self.lateness},
            "partitions": list(self.partition_keys),
            "unit": self.unit,
            "partition_ranges": list(self.partitions),
            "partitions_total": self.partitions_total,
            "partitions_exact": self.is_exact,
            "rows_to_read": self.rows_to_read,
            "notes": list(self.notes),
            "publishes_again": self.publishes_again,
        }


@dataclass(frozen=True)
class Plan:
    branch: str
    models: tuple[ModelPlan, ...] = field(default_factory=tuple)
    # Models with a live view on the branch that the project no longer defines (engine/decisions/removed.py).
    removed: tuple[str, ...] = ()

    @property
    def would_run(self) -> bool:
        """Whether the run would build or publish anything (exit code 1 of `strata plan`)."""
        return any(model.would_change for model in self.models)

    def model(self, name: str) -> ModelPlan:
        return next(model for model in self.models if model.model == name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "would_run": self.would_run,
            "models": [model.as_dict() for model in self.models],
            "removed_models": list(self.removed),
        }


def plan(request: RunRequest, *, timeout: float | None = None) -> Plan:
    """What `run(request)` would do, read from a read-only session (nothing is written); waits at
    most `timeout` seconds (default $STRATA_LOCK_TIMEOUT) for a writer's lock."""
    with opened_project(request, read_only=True, timeout=timeout) as (session, context):
        return Planner(Decider(RunScope(session, context, request))).plan()


class Planner:
    """Tells what a run would do with each model: the run's decisions, for the contents each
    upstream model may come out with."""

    def __init__(self, decider: Decider) -> None:
        self.decider = decider
        self.scope = decider.scope
        self.session = self.scope.session
        self.reader = self.scope.reader
        self.context = self.scope.context
        self.project = self.scope.project
        self.request = self.scope.request
        # model -> the content identities it may have after the run (_UNKNOWN: a new one)
        self.possible: dict[str, set[str]] = {}
        # Models reused but published again (after a rollback or a promotion): what reads them
        # is rebuilt after them, against rows its live view's inputs do not show yet.
        self.republished: set[str] = set()

    def plan(self) -> Plan:
        self.scope.read_requested()
        self.session.begin()  # one consistent reading, as the run's transaction has
        self.reader.remember_snapshots(True)
        try:
            self.scope.read()
            has_history = self.session.has_history()
            self.scope.assume_entry(self.reader.next_entry() if has_history else 1)
            self.scope.read_pointers(has_history=has_history)
            removed = self.scope.removed
            plans = [
                self._plan_model(name) if has_history else self._first(name) for name in self.scope.closure
            ]
        finally:
            self.reader.remember_snapshots(False)
            self.session.rollback()
        plans = [self._with_table_history(planned) for planned in plans]
        return Plan(self.context.branch, tuple(self._with_damage(planned) for planned in plans), removed)

    def _with_table_history(self, planned: ModelPlan) -> ModelPlan:
        """A history over a plain table that would build says what it cannot be, and what verify checks."""
        if not (planned.would_build and self.scope.is_table_history(planned.model)):
            return planned
        return replace(planned, notes=(*planned.notes, TABLE_HISTORY_NOTE))

    def _with_damage(self, planned: ModelPlan) -> ModelPlan:
        """A model rebuilt because a snapshot file of its live state cannot be read says so."""
        damaged = self.decider.damaged.get(planned.model)
        if damaged is None or planned.path == REUSED:
            return planned
        return replace(planned, reason=f"{planned.path}: {rebuilt_reason(damaged)}")

    def _first(self, name: str) -> ModelPlan:
        self.possible[name] = {_UNKNOWN}
        path = VIEW if self.project.models[name].properties.is_view else FULL
        return ModelPlan(name, path, (path,), "first build (the warehouse has no history yet)")

    def _plan_model(self, name: str) -> ModelPlan:
        model = self.project.models[name]
        current = self.decider.current_state(name)
        refs = [ref for ref in model.references if ref not in self.scope.sources]
        pending = tuple(ref for ref in refs if _UNKNOWN in self.possible[ref])
        known = [sorted(self.possible[ref] - {_UNKNOWN}) for ref in refs]
        scenarios = list(itertools.islice(itertools.product(*known), _MAX_SCENARIOS))
        choices = [
            self.decider.key_choice(name, current, dict(zip(refs, combo, strict=True))) for combo in scenarios
        ]
        reusable = [choice for choice in choices if choice.is_reused]
        if not pending:
            decision = self.decider.decision(name, current, choices[0])
            choice = decision.choice
            if decision.is_reused:
                assert choice.existing is not None
                self.scope.chosen[name] = choice.existing
                self.possible[name] = {choice.existing.content_hash}
                if decision.publishes_again:
                    self.republished.add(name)
                    shown = (
                        "the branch has no view of it yet: the run publishes it"
                        if current is None
                        else f"the live view shows snapshot {current.snapshot_id[:12]}: the run publishes it again"
                    )
                    reason = f"{_reused_reason(choice)}; {shown}"
                    return ModelPlan(name, REUSED, (REUSED,), reason, publishes_again=True)
                return ModelPlan(name, REUSED, (REUSED,), _reused_reason(choice))
            planned = self._after_republished(self._build_plan(decision), refs)
        else:
            has_key = any(choice.existing is not None for choice in choices)
            planned = self._pending_plan(name, current, pending, bool(reusable), has_key)
        kept = {record.content_hash for record in (current,) if record is not None}
        kept |= {choice.existing.content_hash for choice in choices if choice.existing is not None}
        self.possible[name] = kept | {_UNKNOWN}
        if current is not None:
            self.scope.chosen[name] = current  # what a reader sees until the build says otherwise
        return planned

    def _after_republished(self, planned: ModelPlan, refs: list[str]) -> ModelPlan:
        """A model rebuilt after input models published again "depends on" them, as it does on an
        upstream rebuilt first: its build follows theirs, and until then its live view agrees
        with its inputs' live views (the partitions or slices it names are the ones the run
        rebuilds once they are published)."""
        again = tuple(ref for ref in refs if ref in self.republished)
        if not again or not planned.would_build:
            return planned
        return replace(planned, depends_on=again)

    # -- a model whose inputs are known -----------------------------------------------------------
    def _build_plan(self, decision: ModelDecision) -> ModelPlan:
        name, choice, current = decision.model, decision.choice, decision.live
        changes = self._changes(name, current, choice)
        if choice.existing is not None:
            return self._forced_plan(name, choice, current)
        # The strategy the run would build it with (engine.decisions.dispatch), as the decision names it.
        if decision.strategy == "view":
            return ModelPlan(name, VIEW, (VIEW, CUTOFF), _why(current, changes, VIEW), changes)
        if decision.strategy == "sliding_window":
            window = self.scope.sliding_source_of(name)
            assert window is not None
            return self._window_plan(name, window, current, changes)
        if decision.strategy == "full" and decision.full_reason is None:  # not an incremental model
            reason = _why(current, changes, FULL)
            maintained = self.scope.row_wise.get(name)
            if current is not None and changes and isinstance(maintained, str):
                reason = f"full: {NOT_ROW_WISE}: {maintained}"  # as the run's history will say
            return ModelPlan(name, FULL, (FULL, CUTOFF), reason, changes)
        return self._incremental_plan(name, current, changes)

    def _window_plan(
        self, name: str, source: str, current: SnapshotRecord | None, changes: tuple[InputChange, ...]
    ) -> ModelPlan:
        """A model over a sliding-window source (engine.builds.sliding_window): the run decides the rest."""
        shape = sliding_window.shape_of(self.context.compiled.models[name], source)
        if isinstance(shape, str) or self.scope.is_partitioned(name):
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: `{source}` is a sliding window", changes)
        if current is None:
            return ModelPlan(name, FULL, (FULL,), "full: first build", changes)
        why = "sliding window: aggregates kept from the weighted delta of the partitions entering and leaving"
        return ModelPlan(name, DELTA, (DELTA, CUTOFF, FULL), why, changes)

    def _forced_plan(self, name: str, choice: KeyChoice, current: SnapshotRecord | None) -> ModelPlan:
        """Inputs and code unchanged, rebuilt anyway: equal rows keep the live snapshot."""
        if name in self.scope.requested:
            return self._incremental_plan(name, current, ())
        model = self.project.models[name]
        if self.scope.is_refreshed(name) and self.scope.is_incremental(name):
            return ModelPlan(name, FULL, (FULL, CUTOFF), "full: full refresh requested")
        if choice.refresh == "always":
            why = "`refresh: always`: rebuilt on every run"
        else:
            why = "selected without --only-stale: recomputed"
        path = VIEW if model.properties.is_view else FULL
        allowed: tuple[str, ...] = (CUTOFF, path)
        if self.scope.is_incremental(name) or self.scope.sliding_source_of(name):
            allowed = (CUTOFF, FULL, DELTA, PARTITIONS)
        return ModelPlan(
            name,
            CUTOFF_CANDIDATE,
            allowed,
            f"inputs and code unchanged, {why}; equal rows keep the live snapshot (early cutoff)",
        )

    def _incremental_plan(
        self, name: str, current: SnapshotRecord | None, changes: tuple[InputChange, ...]
    ) -> ModelPlan:
        if current is None:
            return ModelPlan(name, FULL, (FULL, CUTOFF), "full: first build", changes)
        reason = self.decider.full_reason_before_delta(name, current)
        if reason is not None:
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: {reason}", changes)
        ctx = self.scope.incremental_context(name, "plan", "plan")
        builder = delta_builder(self.scope, name, ctx, current)  # the run's, asked without writing
        if isinstance(builder, KeyBucketBuild):
            builder = builder.partitions  # the plan asks its partition build; nothing is dropped
        if isinstance(builder, AppendedBuilder) or (
            isinstance(builder, PartitionBuild) and builder.changes.follows_segments
        ):
            return self._sliced_plan(name, builder, changes)
        if self.scope.is_partitioned(name):
            assert isinstance(builder, PartitionBuild)
            return self._partition_plan(name, builder, changes)
        if isinstance(builder, PartitionBuild):
            # Partitioned only as the run reads it (requested partitions of a merge model, or a
            # followed input's fingerprints compared): the plan tells the window of its delta.
            builder = DeltaBuilder(ctx, current, builder.segments)
        facts = builder.window_facts()
        if isinstance(facts, Fallback):
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: {facts.reason}", changes)
        if isinstance(builder, TableHistoryBuilder):
            why = (
                "delta: the keys whose rows differ from their current versions get new versions, stamped now"
            )
            return ModelPlan(name, DELTA, (DELTA, CUTOFF), why, changes)
        lateness = self.project.models[name].properties.lateness
        if facts is None:
            return ModelPlan(
                name,
                DELTA,
                (DELTA, CUTOFF, FULL),
                "delta, its window taken after computing the model in full (its cdc column is computed); "
                "rows that appeared at or below the watermark would make it full",
                changes,
                window=(current.watermark, None),
                lateness=lateness,
            )
        return ModelPlan(
            name,
            DELTA,
            (DELTA, CUTOFF),
            "delta trusted: nothing appeared at or below the watermark",
            changes,
            window=(current.watermark, facts.get("high")),
            lateness=lateness,
            rows_to_read=facts.get("window_rows"),
        )

    def _partition_plan(
        self, name: str, builder: PartitionBuild, changes: tuple[InputChange, ...]
    ) -> ModelPlan:
        fallback = builder.precheck()
        if fallback is not None:
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: {fallback.reason}", changes)
        joined = builder.changed_inputs()
        if joined and name in self.scope.requested:
            reason = f"`{joined[0]}` changed, and every partition reads it"
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: {reason}", changes)
        grain = partition_grain(builder.ctx)
        # Key buckets are compared in the warehouse (engine.builds.key_buckets): no figures listed here.
        now = partition_fingerprints(builder.ctx) if grain not in KEY_GRAINS else {}
        keys = builder.changed_partitions()
        in_full = None if joined or name in self.scope.requested else builder.cheaper_in_full(keys)
        if in_full is not None:
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: {in_full.reason}", changes)
        rows = sum(int(now[key][0]) for key in keys if key in now) if now else None
        if name in self.scope.requested:
            reason = "partition-complete rebuild of the partitions requested with --partitions"
        else:
            reason = "partition-complete rebuild of the partitions whose input changed"
        allowed: tuple[str, ...] = (PARTITIONS, CUTOFF)
        notes: tuple[str, ...] = ()
        if joined:
            names = ", ".join(f"`{ref}`" for ref in joined)
            notes = (
                f"{names} changed: the partitions it reaches are found while building (or it is rebuilt in full)",
            )
            allowed = (PARTITIONS, CUTOFF, FULL)
        elif not keys:
            return ModelPlan(
                name,
                CUTOFF_CANDIDATE,
                (CUTOFF,),
                "no partition's input rows changed: the live snapshot stays",
                changes,
                partitions_total=len(now) if now else None,
                is_exact=True,
            )
        return ModelPlan(
            name,
            PARTITIONS,
            allowed,
            reason,
            changes,
            partition_keys=tuple(keys),
            partitions=partition_ranges(keys, grain),
            partitions_total=len(now) if now else None,
            is_exact=not joined,
            rows_to_read=rows,
            notes=notes,
        )

    def _sliced_plan(
        self, name: str, builder: PartitionBuild | AppendedBuilder, changes: tuple[InputChange, ...]
    ) -> ModelPlan:
        """A model maintained from its input models' new segments (engine.builds.model_slices)."""
        fallback = builder.precheck()
        if fallback is not None:
            return ModelPlan(name, FULL, (FULL, CUTOFF), f"full: {fallback.reason}", changes)
        if isinstance(builder, AppendedBuilder):
            why = "delta: the rows its pipeline gives for its inputs' new rows, appended"
            return ModelPlan(name, DELTA, (DELTA, CUTOFF), why, changes)
        joined = builder.changed_inputs()
        keys = builder.changed_partitions()
        grain = partition_grain(builder.ctx)
        reason = "slice-complete rebuild of the slices its input models' new segments reach"
        if joined:
            names = ", ".join(f"`{ref}`" for ref in joined)
            notes = (
                f"{names} changed: the slices it reaches are found while building (or it is rebuilt in full)",
            )
            return ModelPlan(
                name,
                PARTITIONS,
                (PARTITIONS, CUTOFF, FULL),
                reason,
                changes,
                partition_keys=tuple(keys),
                notes=notes,
            )
        if not keys:
            why = "no slice's input rows changed: the live snapshot stays"
            return ModelPlan(name, CUTOFF_CANDIDATE, (CUTOFF,), why, changes, is_exact=True)
        declared = self.project.models[name].properties.partitioned_by
        spec = builder.ctx.model.properties.partitioned_by
        return ModelPlan(
            name,
            PARTITIONS,
            (PARTITIONS, CUTOFF),
            reason,
            changes,
            partition_keys=tuple(keys),
            partitions=partition_ranges(keys, grain),
            is_exact=True,
            # Slices of a model that declares no `partitioned_by` are values of a key it carries.
            unit="partition" if declared is not None else "slice",
            unit_column=spec.column if declared is None and spec is not None else None,
        )

    # -- a model reading an upstream rebuilt first --------------------------------------------------
    def _pending_plan(
        self,
        name: str,
        current: SnapshotRecord | None,
        pending: tuple[str, ...],
        is_reusable: bool,
        has_key: bool,
    ) -> ModelPlan:
        model = self.project.models[name]
        names = ", ".join(f"`{ref}`" for ref in pending)
        code = self.scope.fingerprints[name].value
        changes = tuple(
            InputChange("code", current.model_fingerprint, code)
            for _ in (1,)
            if current is not None and current.model_fingerprint != code
        )
        changes += tuple(
            InputChange(
                f"model:{ref}",
                self.scope.chosen[ref].content_hash if ref in self.scope.chosen else None,
                None,
            )
            for ref in pending
        )
        if model.properties.is_view:
            build: tuple[str, ...] = (VIEW, CUTOFF)
        elif not self.scope.is_incremental(name) or current is None or volatile_calls(model):
            build = (FULL, CUTOFF)
        elif self.scope.is_partitioned(name):
            build = (PARTITIONS, CUTOFF, FULL)
        else:
            build = (DELTA, CUTOFF, FULL)
        if is_reusable:
            reason = f"depends on {names}: reused if it keeps its rows, else rebuilt ({build[0]})"
            return ModelPlan(name, DEPENDS, (REUSED, *build), reason, changes, depends_on=pending)
        if has_key:
            reason = (
                f"depends on {names}: rebuilt either way; if it keeps its rows, inputs and code are unchanged "
                f"and equal rows keep the live snapshot (early cutoff), else {build[0]}"
            )
            return ModelPlan(name, CUTOFF_CANDIDATE, build, reason, changes, depends_on=pending)
        reason = f"rebuilt after {names} ({build[0]}; equal rows keep the live snapshot)"
        return ModelPlan(name, build[0], build, reason, changes, depends_on=pending)

    # -- what changed since the live snapshot's last build ----------------------------------------
    def _changes(
        self, name: str, current: SnapshotRecord | None, choice: KeyChoice
    ) -> tuple[InputChange, ...]:
        if current is None:
            return ()
        entry = self.reader.last_build_of(name, current.snapshot_id)
        if entry is None:
            return ()
        old_sources = {
            read.source: read.fingerprint
            for read in self.reader.entry_sources(entry)
            if not read.partition_key
        }
        old_models = {built.model: built.snapshot_id for built in self.reader.entry_models(entry)}
        changes = []
        fingerprint = self.scope.fingerprints[name].value
        if current.model_fingerprint != fingerprint:
            changes.append(InputChange("code", current.model_fingerprint, fingerprint))
        for ref in self.project.models[name].references:
            if ref in self.scope.sources:
                old = old_sources.get(ref)
                new: str | None = self.scope.sources[ref].fingerprint
            else:
                snapshot = self.reader.snapshot(old_models[ref]) if ref in old_models else None
                old = snapshot.content_hash if snapshot is not None else None
                new = self.scope.chosen[ref].content_hash if ref in self.scope.chosen else None
            if old != new:
                changes.append(
                    InputChange(f"{'source' if ref in self.scope.sources else 'model'}:{ref}", old, new)
                )
        return tuple(changes)


def _reused_reason(choice: KeyChoice) -> str:
    assert choice.existing is not None
    return f"inputs and code unchanged: snapshot {choice.existing.snapshot_id[:12]} has this build key"


def _why(current: SnapshotRecord | None, changes: tuple[InputChange, ...], path: str) -> str:
    if current is None:
        return f"{path}: first build"
    if not changes:
        return f"{path}: no snapshot has this build key (its live state is not the last build's)"
    if path == VIEW:
        return "a `materialize: view` model: a new view over its inputs"
    return "a `replace` model is always rebuilt in full"


def plan_project(project_dir: Path | str, warehouse: Path | str, **options: Any) -> Plan:
    """Convenience wrapper around `plan` for Python callers and tests (options as `run_project`)."""
    request = RunRequest(project_dir=Path(project_dir), warehouse=Path(warehouse), **options)
    return plan(request)
