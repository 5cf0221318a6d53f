"""The contract every build strategy implements, and what strategies share.

A model the run rebuilds is built by one strategy, which engine.decisions.dispatch picks from the
model's decision (engine.decisions): `ViewBuild` (builds/view.py), `FullBuild` (builds/full.py),
`WindowBuild` over a sliding-window source (builds/window.py) and `IncrementalBuild`, a delta on the
live state or else a full build (builds/delta.py). A strategy writes the model's new snapshot or
segment, or keeps a present state whose rows are equal (early cutoff); it never publishes: the run
records what it `Built` and publishes everything at the end, in its transaction (engine.publish).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from sqlglot import exp

from strata_dagster.backends.base import ResourceLimitExceeded, Session, WarehouseError
from strata_dagster.backends.choice import backend_label
from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.builds.limits import limit_error
from strata_dagster.engine.paths import BuildPath, StrategyName
from strata_dagster.engine.sources.logs import LogSource
from strata_dagster.errors import E_BUILD, StrataError
from strata_dagster.language.definition import Model
from strata_dagster.sql.content import WHOLE_ROW, RowBasis
from strata_dagster.sql.segments import WindowStats
from strata_dagster.state.history import SnapshotRecord

# What a build reads each input of its model from in this run (a source, or a model's state).
Relation = Callable[[str], exp.Table | exp.Query]


@dataclass
class IncrementalContext:
    """What the run knows that an incremental build needs."""

    session: Session
    model: Model
    compiled: CompiledModel
    relation: Callable[[str], exp.Table | exp.Query]  # what each input is read from in this run
    fingerprint: str
    snapshot_id: str
    table_name: str
    entry: int
    # The raw input's rows grouped by partition, when the run's source scan computed them.
    partition_groups: dict[str | None, tuple[int, str]] | None = None
    # Row count and row-hash sum of each source relation this run has read, by rendered relation.
    source_totals: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    # What the raw `from` rows are hashed over (a cdc-versioned source: its change column).
    base_basis: RowBasis = WHOLE_ROW
    # Window figures already read in this run (models reading one source with one watermark).
    window_stats_read: dict[tuple[str, ...], WindowStats] = field(default_factory=dict)
    # The day or month slices of this model's rows that the models following it read
    # (engine.builds.state_figures), by name, as expressions over a row.
    follower_slices: Mapping[str, exp.Expr] = field(default_factory=dict)
    # The `from` source's ledger or change feed, whose window a delta reads (engine.sources).
    log: LogSource | None = None
    # The `from` source's figures per key bucket, held by the run's read of the source: the
    # figures query they answer (rendered) and the held table (engine.builds.key_bucket_figures).
    held_source_figures: tuple[str, exp.Table] | None = None


@dataclass(frozen=True)
class Target:
    """What one model's build writes: a new snapshot, recorded under the model's build key."""

    model: Model
    compiled: CompiledModel
    key: str  # the build key the new state is recorded under
    snapshot_id: str
    table_name: str
    fingerprint: str  # the model's code
    entry: int  # the history entry the run records


@dataclass(frozen=True)
class Built:
    """What a build left: the model's state after it, the path history names, and the detail of
    the run's outcome (window, partitions, rows read and merged, ...)."""

    record: SnapshotRecord
    path: BuildPath
    detail: dict[str, object] = field(default_factory=dict)
    is_new: bool = True  # a new snapshot the run records; False: a present state is kept (early cutoff)
    is_partial: bool = False  # only requested partitions were rebuilt: no build key names this state


class BuildStrategy(Protocol):
    """How one rebuilt model of one run is built. A strategy is made for that model with all it
    reads (engine.decisions.dispatch.strategy_for), and `build` is called once, inside the run's
    transaction.

    Examples:
        A `replace` model: `FullBuild(target, ...).build()` writes its query into a new snapshot
        and returns `Built(record, "full")`, or `Built(live, "cutoff", is_new=False)` when the
        rows equal the live state's. An upsert model with a live state: `IncrementalBuild`
        asks its `DeltaBuilder` for a segment of the rows in the window, and falls back to its
        `FullBuild` with the reason when the delta is not provably safe.
    """

    @property
    def strategy(self) -> StrategyName:
        """Which kind of build this is, as the decision names it ("full", "delta", ...)."""
        ...

    def build(self) -> Built:
        """Write the model's new state, never publish it.

        Returns:
            Built: the state the model has after the build (a new snapshot or segment, or a
            present state kept), the path history names, and the outcome's detail.

        Raises:
            StrataError: E_BUILD when the engine rejects the model's SQL, a resource limit's code
                when one is hit, E_UNIQUE or E_CONTRACT when the rows break a pin. Nothing is
                published then: the run rolls its transaction back.
        """
        ...


@contextmanager
def as_build_error(model: Model) -> Iterator[None]:
    """The engine's refusal of a model's SQL (or a resource limit it hit) as the operator's error."""
    try:
        yield
    except ResourceLimitExceeded as error:
        raise limit_error(model.name, error, model.location) from None
    except WarehouseError as error:
        raise StrataError(
            E_BUILD,
            f"{backend_label()} rejected model `{model.name}`: {error}",
            model.location,
            hint=f"run `strata compile PROJECT --model {model.name}` to see the SQL; `strata check PROJECT` "
            "names the step when DuckDB refuses the SQL itself (not a value in the data)",
        ) from None
