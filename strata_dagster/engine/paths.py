"""The paths a model takes in a run (history's words), and the ones `strata plan` adds."""

from __future__ import annotations

from typing import Final, Literal

BuildPath = Literal["reused", "full", "cutoff", "delta", "partitions", "view"]
PlanPath = BuildPath | Literal["cutoff-candidate", "depends"]

REUSED: Final = "reused"  # a snapshot with this build key existed
FULL: Final = "full"  # rebuilt into a new snapshot
CUTOFF: Final = "cutoff"  # rebuilt, rows equal to the current snapshot: that snapshot stays
DELTA: Final = "delta"  # a delta segment on top of the previous state (engine.builds.incremental)
PARTITIONS: Final = "partitions"  # the affected partitions, recomputed completely (engine.builds.partitions)
VIEW: Final = "view"  # a `materialize: view` model: a new view over its inputs, no rows stored

# Only in a plan:
CUTOFF_CANDIDATE: Final = "cutoff-candidate"  # rebuilt, its rows expected equal: the live snapshot stays
DEPENDS: Final = "depends"  # reused or rebuilt, as an upstream rebuilt first comes out

# History's detail of a full build that read some sources from elsewhere (`--source`): which.
REPLACED_SOURCES: Final = "replaced_sources"

# The partition key of a model's whole state (decisions and snapshots are per model today).
UNPARTITIONED: Final = ""

# Which kind of build rebuilds a model (engine.decisions.dispatch builds it).
StrategyName = Literal[
    "view", "sliding_window", "full", "requested", "appended", "sliced", "partitions", "delta"
]
