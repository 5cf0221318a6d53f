"""What a run decides for a model before building it, shared by `strata run` and `strata plan`.

The build key (definition + input identities + merge state + refresh period), the snapshot that
already has it, whether the run rebuilds the model anyway, and the state it builds on: `run`
reuses or builds from these values, `plan` (and the Dagster stale sensor, through it) tells them,
so the two cannot disagree about them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from strata_dagster.engine.paths import UNPARTITIONED
from strata_dagster.state.history import SnapshotRecord

# Which kind of build rebuilds a model (engine.decisions.dispatch builds it).
StrategyName = Literal[
    "view", "sliding_window", "full", "requested", "appended", "sliced", "partitions", "delta"
]


@dataclass(frozen=True)
class KeyChoice:
    """A model's build key given its inputs' contents, and whether a snapshot has it."""

    key: str
    inputs: tuple[tuple[str, str], ...]  # ("source:name" | "model:name", identity)
    existing: SnapshotRecord | None  # a present snapshot with this build key
    is_forced: bool  # rebuilt even when `existing` is there (selected without --only-stale, ...)
    refresh: str | None
    period: str | None

    @property
    def is_reused(self) -> bool:
        return self.existing is not None and not self.is_forced


@dataclass(frozen=True)
class ModelDecision:
    """What the run does with one model, decided before anything of it is written."""

    model: str
    choice: KeyChoice
    live: SnapshotRecord | None  # the state the branch shows now (None: first build, or a table is gone)
    strategy: StrategyName | None = None  # how it is rebuilt; None: reused
    # Why an incremental model is built in full before any delta is tried ("first build", ...).
    full_reason: str | None = None
    publishes_again: bool = False  # reused, but the live view shows another state
    partition: str = UNPARTITIONED  # decisions are per model today

    @property
    def is_reused(self) -> bool:
        return self.choice.is_reused
