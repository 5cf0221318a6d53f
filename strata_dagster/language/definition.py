"""The parsed shape of a strata project: sources, models, pipeline steps and properties.

Value objects are frozen. Expressions keep their source text, their position and the sqlglot
tree they parse to (DuckDB dialect), so later layers never re-read the module text.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from sqlglot import exp

from strata_dagster.errors import Location

MergeStrategy = Literal["replace", "append", "upsert", "append_new", "history"]
MERGE_STRATEGIES: tuple[str, ...] = get_args(MergeStrategy)
INCREMENTAL_STRATEGIES: tuple[str, ...] = ("append", "upsert", "append_new", "history")
KEYED_STRATEGIES: tuple[str, ...] = ("upsert", "append_new", "history")
# The columns a history model's change feed gains beside each version's event columns.
HISTORY_COLUMNS: tuple[str, ...] = ("valid_from", "valid_to", "is_current")

PartitionGrain = Literal["day", "month", "key", "bucket", "block"]
JoinKind = Literal["inner", "left", "right", "full"]
SetOperator = Literal["union", "union all", "except", "intersect"]
VersioningKind = Literal[
    "full", "cdc", "append_only_partitions", "sliding_window", "partition_expiry", "ledger", "feed"
]
# Sources whose rows come with their own change log: a transaction ledger, or a change feed.
LOG_VERSIONINGS: tuple[str, ...] = ("ledger", "feed")
# The merge strategies' names in ledger-driven systems, accepted as ours.
MERGE_STRATEGY_ALIASES: dict[str, str] = {"snapshot_replace": "upsert", "append_always": "append"}
# How a change feed marks a deleted key (`deletes:`): Debezium's operation column, Fivetran's and
# Airbyte's soft-delete columns, or any boolean column.
DeleteForm = Literal["debezium", "fivetran", "airbyte", "flag"]
# Versioned by their partition structure (docs/architecture.md, R8) rather than by their rows.
BUSINESS_VERSIONINGS: tuple[str, ...] = ("append_only_partitions", "sliding_window", "partition_expiry")
# How often a model whose rows depend on the clock (now(), random(), ...) is rebuilt.
Refresh = Literal["always", "hourly", "daily"]
REFRESHES: tuple[str, ...] = get_args(Refresh)
# What a run does when a business-versioned source breaks an assumption it declared.
OnViolation = Literal["error", "rebuild"]
ON_VIOLATIONS: tuple[str, ...] = get_args(OnViolation)
# Where a model's result lives: a snapshot table (default), or a view over its inputs that stores nothing.
Materialize = Literal["table", "view"]
MATERIALIZATIONS: tuple[str, ...] = get_args(Materialize)


@dataclass(frozen=True)
class Expr:
    """A DuckDB SQL expression as written in a module."""

    text: str
    location: Location
    node: exp.Expr = field(compare=False, hash=False, repr=False)

    @property
    def output_name(self) -> str | None:
        """The column name this expression produces in a projection, if it has one."""
        if isinstance(self.node, exp.Alias):
            return self.node.alias
        if isinstance(self.node, exp.Column) and not isinstance(self.node.this, exp.Star):
            return self.node.name
        return None


@dataclass(frozen=True)
class Assignment:
    """`name = expr` in let / derive / aggregate."""

    name: str
    expr: Expr
    location: Location


@dataclass(frozen=True)
class FromStep:
    relation: str
    location: Location


@dataclass(frozen=True)
class JoinStep:
    kind: JoinKind
    relation: str
    on: Expr | None
    using: tuple[str, ...]
    location: Location


@dataclass(frozen=True)
class FilterStep:
    condition: Expr
    location: Location


@dataclass(frozen=True)
class LetStep:
    assignment: Assignment
    location: Location


@dataclass(frozen=True)
class DeriveStep:
    assignments: tuple[Assignment, ...]
    location: Location


@dataclass(frozen=True)
class GroupStep:
    keys: tuple[Expr, ...]
    location: Location


@dataclass(frozen=True)
class AggregateStep:
    assignments: tuple[Assignment, ...]
    location: Location


@dataclass(frozen=True)
class SelectStep:
    items: tuple[Expr, ...]
    location: Location


@dataclass(frozen=True)
class SetOperationStep:
    operator: SetOperator
    relation: str
    location: Location


@dataclass(frozen=True)
class ExpandStep:
    item: Expr
    location: Location


Step = (
    FromStep
    | JoinStep
    | FilterStep
    | LetStep
    | DeriveStep
    | GroupStep
    | AggregateStep
    | SelectStep
    | SetOperationStep
    | ExpandStep
)


@dataclass(frozen=True)
class PartitionSpec:
    """`day(col)`, `month(col)` or a plain `col` that already holds a date key."""

    grain: PartitionGrain
    column: str
    location: Location


@dataclass(frozen=True)
class Versioning:
    kind: VersioningKind = "full"
    column: str | None = None  # cdc(col); feed(position, ...): the position column
    window: int | None = None  # sliding_window(N) / partition_expiry(N)
    # ledger(txn, committed_at, kind): the transaction column of the rows, and the ledger's columns.
    txn_column: str | None = None
    committed_column: str | None = None
    kind_column: str | None = None
    # feed(position, arrival): the column whose window a build reads, when it is not the position.
    arrival_column: str | None = None


@dataclass(frozen=True)
class FeedDeletes:
    """How a change feed marks a deleted key: `debezium(op)`, `fivetran`, `airbyte` or `flag(col)`."""

    form: DeleteForm
    column: str


@dataclass(frozen=True)
class ContractColumn:
    name: str
    type: str
    is_not_null: bool
    location: Location


@dataclass(frozen=True)
class Source:
    name: str
    location: Location
    table: str | None = None
    database: str | None = None
    path: str | None = None
    partitioned_by: PartitionSpec | None = None
    # The first partition: a date, or an integer for an integer partition column (`batch=17/`).
    start: dt.date | int | None = None
    versioning: Versioning = Versioning()
    # The columns identifying a row (`key: [order_id]`): what a row-wise model's slices are cut by
    # when the source has no change column (engine/builds/key_buckets.py). Not checked for uniqueness.
    key: tuple[str, ...] | None = None
    is_immutable_partitions: bool = False
    is_monotonic_partitions: bool = False
    # A file source's partition is complete once this file is in its folder (e.g. '_SUCCESS').
    complete_when: str | None = None
    # The newest N partitions are not consumed until later ones exist (still being written).
    settle: int | None = None
    on_violation: OnViolation = "error"
    description: str | None = None
    start_location: Location | None = None  # where `start:` was written, for errors that point at it
    ledger: str | None = None  # `versioning: ledger(...)`: the relation of its transactions
    feed_keys: tuple[str, ...] | None = None  # `versioning: feed(...)`: the key of a feed's rows
    deletes: FeedDeletes | None = None  # `versioning: feed(...)`: how a feed row deletes its key

    @property
    def is_business_versioned(self) -> bool:
        return self.versioning.kind in BUSINESS_VERSIONINGS

    @property
    def table_name(self) -> str:
        return self.table or self.name

    @property
    def is_log(self) -> bool:
        """Whether the source comes with its change log (a transaction ledger or a change feed)."""
        return self.versioning.kind in LOG_VERSIONINGS

    @property
    def ledger_name(self) -> str | None:
        """A ledger source's transactions as a test block names them: the `ledger:` table's name
        without its schema (`given order_txns [...]` for `ledger: raw.order_txns`)."""
        if self.versioning.kind != "ledger" or self.ledger is None:
            return None
        return self.ledger.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Freshness:
    """`freshness: 1 day`: the model's last build may be at most `seconds` old (as written: `text`)."""

    seconds: int
    text: str


@dataclass(frozen=True)
class ModelProperties:
    is_incremental: bool = False
    merge_strategy: MergeStrategy = "replace"
    merge_keys: tuple[str, ...] | None = None
    cdc_column: str | None = None
    check_columns: tuple[str, ...] | None = None  # a history's versions: when these change
    deleted_flag: str | None = None  # a history's column: whether a delete closed the version
    lateness: str | None = None
    partitioned_by: PartitionSpec | None = None
    unique: tuple[str, ...] | None = None
    contract: tuple[ContractColumn, ...] | None = None
    order_by: tuple[str, ...] | None = None
    refresh: Refresh | None = None
    materialize: Materialize = "table"
    description: str | None = None
    tags: tuple[str, ...] = ()  # labels for selection (`tag:name`) and Dagster asset tags
    owners: tuple[str, ...] = ()  # emails or `team:name`: the Dagster asset's owners
    freshness: Freshness | None = None  # how old its last build may be before Dagster flags it
    # Where each property was written, for errors that point at it.
    locations: tuple[tuple[str, Location], ...] = ()

    def location_of(self, name: str) -> Location | None:
        return dict(self.locations).get(name)

    @property
    def is_view(self) -> bool:
        return self.materialize == "view"


@dataclass(frozen=True)
class Model:
    name: str
    steps: tuple[Step, ...]
    properties: ModelProperties
    location: Location

    @property
    def references(self) -> tuple[str, ...]:
        """Relations this model reads, in pipeline order, without repeats."""
        names: list[str] = []
        for step in self.steps:
            if isinstance(step, (FromStep, JoinStep, SetOperationStep)) and step.relation not in names:
                names.append(step.relation)
        return tuple(names)

    @property
    def has_aggregation(self) -> bool:
        return any(isinstance(step, (GroupStep, AggregateStep)) for step in self.steps)


@dataclass(frozen=True)
class FixtureRow:
    values: tuple[Expr, ...]
    location: Location


@dataclass(frozen=True)
class FixtureTable:
    """Rows written in a test: the columns that matter, then one value per column in each row."""

    columns: tuple[str, ...]
    rows: tuple[FixtureRow, ...]
    location: Location


@dataclass(frozen=True)
class ModelTest:
    """`test MODEL NAME { given R [...] previous [...] expect [...] }`: the model run over fixture
    rows of its inputs must give the expected rows; with `previous`, as one incremental step."""

    model: str
    name: str
    given: tuple[tuple[str, FixtureTable], ...]
    expect: FixtureTable
    location: Location
    previous: FixtureTable | None = None

    @property
    def is_incremental_step(self) -> bool:
        return self.previous is not None


@dataclass(frozen=True)
class Module:
    path: Path
    sources: tuple[Source, ...]
    models: tuple[Model, ...]
    tests: tuple[ModelTest, ...] = ()


@dataclass(frozen=True)
class Project:
    """Every module under a folder, with names resolved and checked for cycles."""

    root: Path
    modules: tuple[Module, ...]
    sources: dict[str, Source] = field(compare=False)
    models: dict[str, Model] = field(compare=False)
    # Models in dependency order: every model after everything it reads.
    order: tuple[str, ...] = ()
    # A digest of the module files' paths and texts it was read from ("" when not read from files)
    text_digest: str = field(default="", compare=False)

    @property
    def tests(self) -> tuple[ModelTest, ...]:
        """Every model unit test, module by module in file order."""
        return tuple(test for module in self.modules for test in module.tests)

    def module_of(self, name: str) -> Module:
        for module in self.modules:
            if any(source.name == name for source in module.sources) or any(
                model.name == name for model in module.models
            ):
                return module
        raise KeyError(name)

    def upstream_models(self, name: str) -> tuple[str, ...]:
        return tuple(ref for ref in self.models[name].references if ref in self.models)
