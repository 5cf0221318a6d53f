"""What a run decides for a model before building it, shared by `strata run` and `strata plan`.

The build key (definition + input identities + merge state + refresh period), the snapshot that
already has it, whether the run rebuilds the model anyway, and the state it builds on: `run`
reuses or builds from these values, `plan` (and the Dagster stale sensor, through it) tells them,
so the two cannot disagree about them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.paths import UNPARTITIONED, StrategyName
from strata_dagster.state.history import SnapshotRecord


@dataclass(frozen=True)
class RunRequest:
    """What `strata run` (or `strata plan`) was asked: the project, the warehouse, the selection."""

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
    # selected partitioned models of their grain (engine.builds.partition_range).
    partitions: tuple[str, ...] = ()


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
