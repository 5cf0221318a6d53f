"""What every build strategy shares: what it writes, what it hands back, and its errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.limits import limit_error
from strata_dagster.engine.paths import BuildPath
from strata_dagster.errors import E_BUILD, StrataError
from strata_dagster.language.definition import Model
from strata_dagster.warehouse.engines import engine_label
from strata_dagster.warehouse.history import SnapshotRecord
from strata_dagster.warehouse.session import ResourceLimitExceeded, WarehouseError

# What a build reads each input of its model from in this run (a source, or a model's state).
Relation = Callable[[str], exp.Table | exp.Query]


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
            f"{engine_label()} rejected model `{model.name}`: {error}",
            model.location,
            hint=f"run `strata compile PROJECT --model {model.name}` to see the SQL; `strata check PROJECT` "
            "names the step when DuckDB refuses the SQL itself (not a value in the data)",
        ) from None
