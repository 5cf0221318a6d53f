"""An incremental model's build: a delta on its live state when it is provably safe, else in full.

Which delta builder computes the delta (a window of an upsert or an append, partitions, slices, a
model's appended rows, requested partitions) is engine.decisions.dispatch's choice; this module runs
it, checks the pins on what it wrote, and falls back to the model's full build with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from strata_dagster.backends.base import Session
from strata_dagster.engine.builds.full import FullBuild
from strata_dagster.engine.builds.incremental import Fallback
from strata_dagster.engine.builds.pins import check_delta_pins, unique_checked
from strata_dagster.engine.builds.segment import DeltaBuild, SchemaChanged
from strata_dagster.engine.builds.strategy import Built, Target, as_build_error
from strata_dagster.engine.paths import CUTOFF, BuildPath, StrategyName
from strata_dagster.faults import checkpoint
from strata_dagster.language.definition import Model


class DeltaBuilding(Protocol):
    """A delta's builder (engine.decisions.dispatch.delta_builder): a `DeltaBuilder`, an
    `AppendedBuilder` or a `PartitionBuild`."""

    def build(self) -> DeltaBuild | Fallback:
        """Write the delta's segment (or keep the live state), or say why the model is built in full."""
        ...


@dataclass
class IncrementalBuild:
    """A delta on the live state, or the model's full build when no delta is tried or it falls back.

    Args:
        strategy: the decision's name for it ("delta", "partitions", "sliced", "appended",
            "requested"; "full" when a full reason rules every delta out).
        target: what the build writes.
        session: the run's session.
        delta: makes the delta's builder (engine.decisions.dispatch.delta_builder); None when
            `full_reason` rules a delta out before any row is read.
        full_reason: why the model is built in full without trying a delta ("first build", ...).
        full: the model's full build, the fallback.
        path: the path a new delta state takes in history ("delta", or "partitions").
        is_partial: only the partitions requested by name are rebuilt: no build key names the state.
        outcome: the detail every outcome of the model carries (a row-wise model's slicing).

    Returns (from `build`):
        Built: the delta's new state (its pins checked) or the live state kept (path "cutoff"),
        else the full build's, its detail saying why it was full (`full_reason`).
    """

    strategy: StrategyName
    target: Target
    session: Session
    delta: Callable[[], DeltaBuilding] | None
    full_reason: str | None
    full: FullBuild
    path: BuildPath
    is_partial: bool = False
    outcome: Mapping[str, object] | None = None

    def build(self) -> Built:
        reason = self.full_reason
        if self.delta is not None:
            delta = tried_delta(self.target.model, self.delta)
            if isinstance(delta, DeltaBuild):
                built = accepted(self.session, self.target.model, delta, self.path, self.is_partial)
                return replace(built, detail=self._with_outcome(built.detail))
            reason = delta.reason
        built = self.full.build()
        return replace(built, detail=self._with_outcome({"full_reason": reason}))

    def _with_outcome(self, detail: dict[str, object]) -> dict[str, object]:
        return {**detail, **self.outcome} if self.outcome else detail


def tried_delta(model: Model, builder: Callable[[], DeltaBuilding]) -> DeltaBuild | Fallback:
    """The delta `builder` makes and builds, or why the model is built in full instead."""
    try:
        with as_build_error(model):
            return builder().build()
    except SchemaChanged:
        return Fallback("the delta's columns differ from the previous state's")


def accepted(session: Session, model: Model, build: DeltaBuild, path: BuildPath, is_partial: bool) -> Built:
    """A delta's outcome as the run records it: the live state kept when no row changed, else the
    new state once its pins hold (checked on the new segment and the rows it keeps)."""
    if build.is_unchanged:
        return Built(build.record, CUTOFF, build.detail, is_new=False, is_partial=is_partial)
    record = build.record
    checkpoint("snapshot_created")
    check_delta_pins(session, session.history, model, record)
    checkpoint("pins_checked")
    record = replace(record, detail={**record.detail, **unique_checked(model)})
    return Built(record, path, build.detail, is_partial=is_partial)
