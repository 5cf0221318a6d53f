"""What a run decides for a model before building it, shared by `strata run` and `strata plan`.

The build key (definition + input identities + merge state + refresh period), the snapshot that
already has it, and whether the run rebuilds the model anyway: `run` reuses or builds from this,
`plan` tells it, so the two cannot disagree about it.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata_dagster.state.history import SnapshotRecord


@dataclass(frozen=True)
class KeyChoice:
    key: str
    inputs: tuple[tuple[str, str], ...]  # ("source:name" | "model:name", identity)
    existing: SnapshotRecord | None  # a present snapshot with this build key
    is_forced: bool  # rebuilt even when `existing` is there (selected without --only-stale, ...)
    refresh: str | None
    period: str | None

    @property
    def is_reused(self) -> bool:
        return self.existing is not None and not self.is_forced
