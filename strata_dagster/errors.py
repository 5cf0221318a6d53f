"""One catalogue of user-facing errors.

Every error a user can cause carries a fixed code, where it happened (file:line:col, or a model /
partition) and what to do about it. Tests assert on codes, never on prose.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

# Codes fixed by the language's design (docs/language.md, section 9).
E_BACKFILL: Final = "E085"
E_MERGE_STRATEGY: Final = "E086"
E_MERGE_ON_AGGREGATE: Final = "E087"
E_CDC_COLUMN: Final = "E088"
E_MERGE_KEYS: Final = "E089"

# The project's own codes.
E_SYNTAX: Final = "E001"
E_EXPRESSION: Final = "E002"
E_DUPLICATE_NAME: Final = "E003"
E_UNKNOWN_RELATION: Final = "E004"
E_CYCLE: Final = "E005"
E_PROPERTY: Final = "E006"
E_PROPERTY_VALUE: Final = "E007"
E_PIPELINE: Final = "E008"
E_UNKNOWN_COLUMN: Final = "E009"
E_PARTITION_COLUMN: Final = "E010"
E_SET_OPERATION: Final = "E011"
E_SOURCE: Final = "E012"
E_PROJECT: Final = "E013"
E_DUPLICATE_COLUMN: Final = "E014"
E_UNNAMED_COLUMN: Final = "E015"
E_PARTIAL_MONTH: Final = "E016"
E_VIEW_MODEL: Final = "E017"
W_NONDETERMINISTIC_WINDOW: Final = "W001"
W_VOLATILE: Final = "W002"
W_BOUNDS_UNREAD: Final = "W003"
W_REMOVED_MODEL: Final = "W004"
W_SNAPSHOT_FILE_REBUILT: Final = "W005"
W_DAGSTER_UNREPORTED: Final = "W006"
E_WAREHOUSE: Final = "E020"
E_WAREHOUSE_BUSY: Final = "E021"
E_OVERRIDE: Final = "E022"
E_UNKNOWN_RUN: Final = "E023"
E_SNAPSHOT_GONE: Final = "E024"
E_UNKNOWN_MODEL: Final = "E025"
E_BRANCH: Final = "E026"
E_UNIQUE: Final = "E030"
E_CONTRACT: Final = "E031"
E_BUILD: Final = "E032"
E_RESOURCE_LIMIT: Final = "E033"
E_GC: Final = "E034"
E_SERVING: Final = "E035"
E_NOT_SERVED: Final = "E036"
E_SNAPSHOT_STORAGE: Final = "E037"
E_SNAPSHOT_FILE: Final = "E038"
E_SERVING_DAMAGED: Final = "E039"
E_VERIFY_PARTITIONS: Final = "E040"
E_VERIFY_LIVE: Final = "E041"
E_PARTITION_TYPE: Final = "E050"
E_PARTITION_LAYOUT: Final = "E051"
E_PARTITION_CHANGED: Final = "E052"
E_PARTITION_BACKFILLED: Final = "E053"
E_PARTITION_VERIFY: Final = "E054"
E_PARTITION_START: Final = "E055"
E_PARTITION_UNREADABLE: Final = "E056"
E_PARTITION_VALUE: Final = "E057"
E_PARTITION_COLUMNS: Final = "E058"
E_TEST_TABLE: Final = "E060"
E_TEST_DEFINITION: Final = "E061"
E_TEST_MODEL: Final = "E062"
E_TEST_COLUMN: Final = "E063"
E_TEST_RUN: Final = "E064"
E_FRESHNESS: Final = "E065"
E_GC_SCHEDULE: Final = "E066"
E_COMPONENT: Final = "E067"
E_RANGE_RUN: Final = "E068"
E_BACKEND_DIALECT: Final = "E070"
E_BACKEND: Final = "E071"
E_BACKEND_UNSUPPORTED: Final = "E072"
E_SHOW_OUTPUT: Final = "E073"
E_USAGE: Final = "E074"
E_LOG_SOURCE: Final = "E090"
E_LEDGER_DRAINED: Final = "E091"
E_HISTORY_SOURCE: Final = "E092"
E_ICEBERG: Final = "E075"

CATALOGUE: Final[dict[str, str]] = {
    E_SYNTAX: "the module does not follow the strata grammar",
    E_EXPRESSION: "an expression is not valid DuckDB SQL",
    E_DUPLICATE_NAME: "two sources or models share a name",
    E_UNKNOWN_RELATION: "a step names a source or model that does not exist",
    E_CYCLE: "models depend on each other in a cycle",
    E_PROPERTY: "an unknown, misplaced or repeated property",
    E_PROPERTY_VALUE: "a property value of the wrong shape",
    E_PIPELINE: "pipeline steps in an order that has no meaning",
    E_UNKNOWN_COLUMN: "an expression uses a column its input does not have",
    E_PARTITION_COLUMN: "the partition column is not an output column",
    E_SET_OPERATION: "a set operation over relations of different arity",
    E_SOURCE: "a source declaration that cannot be read as written",
    E_PROJECT: "the project folder cannot be loaded",
    E_DUPLICATE_COLUMN: "two output columns share a name",
    E_UNNAMED_COLUMN: "a computed column has no name",
    E_PARTIAL_MONTH: "a month-partitioned model filters its days, leaving months partial",
    E_VIEW_MODEL: "a `materialize: view` model sets a property a view cannot honour",
    E_WAREHOUSE: "the warehouse cannot be opened or read",
    E_WAREHOUSE_BUSY: "another process holds the warehouse longer than the lock timeout",
    E_OVERRIDE: "a malformed `--source s=t` or one naming an unknown source or table",
    E_UNKNOWN_RUN: "no run with that id in the history",
    E_SNAPSHOT_GONE: "a snapshot the operation needs was dropped by gc",
    E_UNKNOWN_MODEL: "a `--models` selector is malformed or matches no model (name, glob or tag)",
    E_BRANCH: "a branch name that is invalid, missing or already taken",
    E_UNIQUE: "a `unique` pin failed: duplicate keys in the new snapshot",
    E_CONTRACT: "a `contract` pin failed: the new snapshot's schema differs",
    E_BUILD: "the backend (DuckDB or Spark) rejected a model's SQL while building it",
    E_RESOURCE_LIMIT: "a build exceeded the memory or spill-space limit, or a limit is not a size",
    E_GC: "a `strata gc` option that cannot be read, or a compaction that could not complete",
    E_SERVING: "the writer published, but could not write the serving copy readers open",
    E_NOT_SERVED: "`strata connect` on a warehouse where nothing is published yet",
    E_SNAPSHOT_FILE: "a snapshot file the warehouse reads is missing or unreadable (removed, cut short, overwritten)",
    E_SERVING_DAMAGED: "the serving copy readers open is damaged (its catalog, link or manifest cannot be read)",
    E_VERIFY_PARTITIONS: "a `--partitions` value that is no day, month or range, or no partition of the selected "
    "models (wrong grain, before `start` or the data, in the future), or no partitioned model selected",
    E_VERIFY_LIVE: "verify or show cannot read a model's live view on the branch (never published, or broken)",
    E_PARTITION_TYPE: "a partition column with no total order (not DATE, TIMESTAMP or an integer) on a "
    "business-versioned source, or a non-time column on a time-partitioned model",
    E_PARTITION_LAYOUT: "a business-versioned file source whose files sit in no `column=value/` folder of its "
    "partition column",
    E_PARTITION_CHANGED: "a consumed partition of a business-versioned source changed (a file added, removed, "
    "rewritten or resized; a row count or range changed): immutability broken",
    E_PARTITION_BACKFILLED: "a new partition of a business-versioned source at or before the last consumed one: "
    "monotonic arrival broken",
    E_PARTITION_VERIFY: "`strata verify --sources`: a consumed partition no longer holds what the ledger recorded, "
    "or a source's database file holds other rows than the record of its unchanged stamp",
    E_PARTITION_START: "a partitioned source's `start:` of another kind than its partition column (a date for an "
    "integer column, an integer for a DATE or TIMESTAMP one)",
    E_PARTITION_UNREADABLE: "a new partition of a business-versioned file source holds a file that cannot be read "
    "(truncated, not Parquet, not permitted)",
    E_PARTITION_VALUE: "a business-versioned file source's folder `column=value/` whose value is not of the "
    "partition column's kind (`dt=garbage/`, `dt=2026-13-45/`)",
    E_PARTITION_COLUMNS: "a new partition of a business-versioned file source holds a file that lacks a column "
    "of the source",
    E_TEST_TABLE: "a test's fixture table is not a row of column names followed by rows of as many values",
    E_TEST_DEFINITION: "a test block without `expect`, with a repeated part, or `previous` on a model that is not incremental",
    E_TEST_MODEL: "a test names a model that does not exist, or reads a relation the model does not read",
    E_TEST_COLUMN: "a test names a column its input or its model's output does not have",
    E_TEST_RUN: "DuckDB rejected a test's fixture values or the model run over them",
    E_FRESHNESS: "a `freshness` value that is not a duration of at least a minute (`1 day`, `12 hours`, `30 minutes`)",
    E_GC_SCHEDULE: "a gc schedule whose cron, `keep` or `older_than` cannot be read",
    E_COMPONENT: "a StrataProjectComponent attribute (defs.yaml) that names no project or cannot be read",
    E_RANGE_RUN: "a strata_backfill_range run's assets or partition range that the project does not have",
    E_BACKEND_DIALECT: "a construct the chosen backend (spark) would compute differently from DuckDB, or cannot "
    "compute, and strata cannot rewrite: refused at compile time",
    E_BACKEND: "an unknown backend, a backend that is not installed, or a backend setting that cannot be used",
    E_BACKEND_UNSUPPORTED: "a project or command uses something the chosen backend does not offer",
    E_SHOW_OUTPUT: "a `strata show --output` file that is not .parquet or .csv, or cannot be written",
    E_USAGE: "a command line `strata` cannot read: an unknown command or option, a missing argument, "
    "a value of the wrong type or out of range",
    E_LOG_SOURCE: "a ledger or change-feed source declared incompletely (`ledger(...)` without `ledger:`, "
    "`feed(...)` without `feed_keys`, `ledger:`, `feed_keys` or `deletes:` on another versioning, a `deletes:` "
    "form that is not debezium(op), fivetran, airbyte or flag(col))",
    E_LEDGER_DRAINED: "a ledger's transactions in a build's window have no rows left in the source (drained or "
    "compacted away): no delta is taken from them",
    E_HISTORY_SOURCE: "a `merge_strategy: history` model that reads a model, or whose merge keys are not its change "
    "feed's keys (or not columns of its source passed through); `check_columns` or `deleted_flag` on a model "
    "that is not a history",
    E_ICEBERG: "an Iceberg catalog that cannot be named, opened or written: the warehouse's run stands, "
    "its tables catch up at the next run",
    E_BACKFILL: "a backfill cannot start or failed before publication",
    E_MERGE_STRATEGY: "unknown merge_strategy",
    E_MERGE_ON_AGGREGATE: "append/upsert/append_new on a model with group/aggregate",
    E_CDC_COLUMN: "cdc_column missing, or not an output column",
    E_MERGE_KEYS: "upsert/append_new without valid merge_keys",
}


@dataclass(frozen=True)
class Location:
    """A place in a module: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def first_line(error: BaseException) -> str:
    """An exception's message as one line (its first), or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class StrataError(Exception):
    """An error the user can fix. Never shown as a traceback."""

    def __init__(
        self,
        code: str,
        message: str,
        location: Location | None = None,
        *,
        hint: str | None = None,
        subject: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.location = location
        self.hint = hint
        # A model or model/partition when there is no file position to point at.
        self.subject = subject
        super().__init__(self.render())

    @property
    def errors(self) -> tuple[StrataError, ...]:
        return (self,)

    def render(self) -> str:
        lines = [f"error[{self.code}]: {self.message}"]
        if self.location is not None:
            lines.append(f"  --> {self.location}")
        elif self.subject is not None:
            lines.append(f"  --> {self.subject}")
        if self.hint:
            lines.append(f"  = help: {self.hint}")
        return "\n".join(lines)


class StrataErrorGroup(StrataError):
    """Several independent errors found in one pass; the first one gives the code."""

    def __init__(self, errors: Iterable[StrataError]) -> None:
        self._errors = tuple(errors)
        if not self._errors:
            raise ValueError("StrataErrorGroup needs at least one error")
        first = self._errors[0]
        super().__init__(first.code, first.message, first.location, hint=first.hint, subject=first.subject)

    @property
    def errors(self) -> tuple[StrataError, ...]:
        return self._errors

    def render(self) -> str:
        return "\n\n".join(error.render() for error in self._errors)

    @property
    def codes(self) -> list[str]:
        return [error.code for error in self._errors]


def raise_collected(errors: list[StrataError]) -> None:
    """Raise the collected errors, one alone or as a group; return when there are none."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise StrataErrorGroup(errors)


@dataclass(frozen=True)
class StrataWarning:
    """Something legal that is probably a mistake; printed, never fatal."""

    code: str
    message: str
    location: Location | None = None
    hint: str | None = None

    def render(self) -> str:
        lines = [f"warning[{self.code}]: {self.message}"]
        if self.location is not None:
            lines.append(f"  --> {self.location}")
        if self.hint:
            lines.append(f"  = help: {self.hint}")
        return "\n".join(lines)
