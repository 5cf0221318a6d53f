"""Turn the `name: value` lines of sources and models into typed properties."""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from strata_dagster.errors import (
    E_FRESHNESS,
    E_LOG_SOURCE,
    E_MERGE_STRATEGY,
    E_PROPERTY,
    E_PROPERTY_VALUE,
    E_SOURCE,
    Location,
    StrataError,
    raise_collected,
)
from strata_dagster.language.definition import (
    MATERIALIZATIONS,
    MERGE_STRATEGIES,
    MERGE_STRATEGY_ALIASES,
    ON_VIOLATIONS,
    REFRESHES,
    ContractColumn,
    FeedDeletes,
    Freshness,
    ModelProperties,
    PartitionSpec,
    Source,
    Versioning,
)
from strata_dagster.language.expressions import is_type

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUALIFIED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}")
_PARTITION = re.compile(r"(?:(day|month)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)|([A-Za-z_][A-Za-z0-9_]*))")
_VERSIONING = re.compile(r"([a-z_]+)\s*(?:\(\s*([A-Za-z0-9_]+)\s*\))?")
_DATE = re.compile(r"'?(\d{4}-\d{2}-\d{2})'?")
# Dagster's rule for tag keys (and strict values): a model's tags become its asset's tag keys.
TAG_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,63}")
# Dagster's rule for asset owners: an email address, or a team name prefixed with `team:`.
OWNER_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}")
OWNER_TEAM_PREFIX = "team:"
_CONTRACT_TYPE = re.compile(r"(?P<type>.+?)(?P<not_null>\s+not\s+null)?", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class RawValue:
    """A property value as written: its text, and its items for `[...]` or entries for `{...}`."""

    text: str
    location: Location
    items: tuple[RawValue, ...] | None = None
    entries: tuple[tuple[str, RawValue], ...] | None = None


@dataclass(frozen=True)
class RawProperty:
    name: str
    location: Location
    value: RawValue | None  # None for a bare flag such as `incremental`


def _bad_value(prop: RawProperty, expected: str, example: str) -> StrataError:
    shown = prop.value.text if prop.value is not None else "(no value)"
    return StrataError(
        E_PROPERTY_VALUE,
        f"`{prop.name}` expects {expected}, got `{shown}`",
        prop.value.location if prop.value is not None else prop.location,
        hint=f"write it like `{prop.name}: {example}`",
    )


def _needs_value(prop: RawProperty, example: str) -> RawValue:
    if prop.value is None:
        raise StrataError(
            E_PROPERTY_VALUE,
            f"`{prop.name}` needs a value",
            prop.location,
            hint=f"write `{prop.name}: {example}`",
        )
    return prop.value


def as_name(prop: RawProperty) -> str:
    value = _needs_value(prop, "column_name")
    if not _IDENTIFIER.fullmatch(value.text):
        raise _bad_value(prop, "a column name", "column_name")
    return value.text


def as_names(prop: RawProperty) -> tuple[str, ...]:
    value = _needs_value(prop, "[col_a, col_b]")
    if value.items is None:
        if _IDENTIFIER.fullmatch(value.text):  # a single name without brackets is accepted
            return (value.text,)
        raise _bad_value(prop, "a list of column names", "[col_a, col_b]")
    names = []
    for item in value.items:
        if not _IDENTIFIER.fullmatch(item.text):
            raise StrataError(
                E_PROPERTY_VALUE,
                f"`{prop.name}` lists `{item.text}`, which is not a column name",
                item.location,
                hint=f"write it like `{prop.name}: [col_a, col_b]`",
            )
        names.append(item.text)
    return tuple(names)


def as_tags(prop: RawProperty) -> tuple[str, ...]:
    return _as_labels(
        prop,
        "[finance, daily]",
        lambda text: TAG_PATTERN.fullmatch(text) is not None,
        "not a tag",
        "a tag is 1 to 63 letters, digits, `_`, `-` or `.`, e.g. `tags: [finance, daily]`",
        "tag",
    )


def as_owners(prop: RawProperty) -> tuple[str, ...]:
    return _as_labels(
        prop,
        "[ana@shop.example, 'team:finance']",
        is_valid_owner,
        "neither an email address nor `team:name`",
        "an owner is an email or a team name prefixed with `team:` (Dagster's rule), "
        "e.g. `owners: [ana@shop.example, 'team:finance']`",
        "owner",
    )


def _as_labels(
    prop: RawProperty,
    example: str,
    is_valid: Callable[[str], bool],
    is_not: str,
    hint: str,
    noun: str,
) -> tuple[str, ...]:
    """A list of labels (or one), each bare or quoted, valid and listed once."""
    value = _needs_value(prop, example)
    items = value.items if value.items is not None else (value,)
    labels: list[str] = []
    for item in items:
        text = item.text
        if len(text) >= 2 and text[0] == text[-1] == "'":
            text = text[1:-1]
        if not is_valid(text):
            raise StrataError(
                E_PROPERTY_VALUE,
                f"`{prop.name}` lists `{item.text}`, which is {is_not}",
                item.location,
                hint=hint,
            )
        if text in labels:
            raise StrataError(
                E_PROPERTY_VALUE,
                f"`{prop.name}` lists `{text}` twice",
                item.location,
                hint=f"list each {noun} once",
            )
        labels.append(text)
    return tuple(labels)


def is_valid_owner(text: str) -> bool:
    if text.startswith(OWNER_TEAM_PREFIX):
        return len(text) > len(OWNER_TEAM_PREFIX)
    return OWNER_EMAIL.fullmatch(text) is not None


def as_string(prop: RawProperty) -> str:
    value = _needs_value(prop, "'text'")
    text = value.text
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    raise _bad_value(prop, "a quoted string", "'text'")


def as_bool(prop: RawProperty) -> bool:
    if prop.value is None:
        return True
    lowered = prop.value.text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise _bad_value(prop, "true or false", "true")


def _date_of(text: str) -> dt.date | None:
    match = _DATE.fullmatch(text)
    if match:
        try:
            return dt.date.fromisoformat(match.group(1))
        except ValueError:
            pass
    return None


_INTEGER = re.compile(r"-?\d+")


def as_partition_start(prop: RawProperty) -> dt.date | int:
    """A partitioned source's first partition: a date, or an integer (an integer partition column)."""
    value = _needs_value(prop, "2025-01-01")
    if _INTEGER.fullmatch(value.text):
        return int(value.text)
    day = _date_of(value.text)
    if day is None:
        raise _bad_value(
            prop, "a date YYYY-MM-DD, or an integer for an integer partition column", "2025-01-01"
        )
    return day


def as_partition(prop: RawProperty) -> PartitionSpec:
    value = _needs_value(prop, "day(column)")
    match = _PARTITION.fullmatch(value.text)
    if not match:
        raise _bad_value(prop, "day(column), month(column) or a date column", "day(order_ts)")
    if match.group(3):
        return PartitionSpec("key", match.group(3), value.location)
    return PartitionSpec(match.group(1), match.group(2), value.location)  # type: ignore[arg-type]  # the pattern's grains


_LOG_VERSIONING = re.compile(r"(ledger|feed)\s*\(([^()]*)\)")


def _log_versioning(prop: RawProperty, text: str) -> Versioning | None:
    """`ledger(txn, committed_at, kind)` or `feed(position[, arrival])`, else None."""
    match = _LOG_VERSIONING.fullmatch(text)
    if not match:
        return None
    names = [name.strip() for name in match.group(2).split(",")]
    if not all(_IDENTIFIER.fullmatch(name) for name in names):
        return None
    if match.group(1) == "ledger" and len(names) == 3:
        txn, committed, kind = names
        return Versioning("ledger", txn_column=txn, committed_column=committed, kind_column=kind)
    if match.group(1) == "feed" and len(names) in (1, 2):
        return Versioning("feed", column=names[0], arrival_column=names[1] if len(names) == 2 else None)
    return None


_DELETES = re.compile(r"(debezium|fivetran|airbyte|flag)\s*(?:\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\))?")
_DELETE_COLUMNS = {"fivetran": "_fivetran_deleted", "airbyte": "_ab_cdc_deleted_at"}


def as_deletes(prop: RawProperty) -> FeedDeletes:
    """`deletes: debezium(op)`, `fivetran`, `airbyte` or `flag(col)`: how a feed row deletes its key."""
    value = _needs_value(prop, "debezium(op)")
    match = _DELETES.fullmatch(value.text)
    form, column = (match.group(1), match.group(2)) if match else (None, None)
    if form in _DELETE_COLUMNS and column is None:
        return FeedDeletes(form, _DELETE_COLUMNS[form])  # type: ignore[arg-type]  # one of the forms just tested
    if form in ("debezium", "flag") and column is not None:
        return FeedDeletes(form, column)  # type: ignore[arg-type]  # one of the forms just tested
    raise StrataError(
        E_LOG_SOURCE,
        f"`deletes` expects debezium(op_column), fivetran, airbyte or flag(column), got `{value.text}`",
        value.location,
        hint="write `deletes: debezium(op)` for an operation column c/u/d/r, `deletes: fivetran`, "
        "`deletes: airbyte`, or `deletes: flag(is_deleted)` for a boolean column",
    )


def as_versioning(prop: RawProperty) -> Versioning:
    value = _needs_value(prop, "full")
    log = _log_versioning(prop, value.text)
    if log is not None:
        return log
    match = _VERSIONING.fullmatch(value.text)
    kind = match.group(1) if match else None
    argument = match.group(2) if match else None
    if kind == "full" and argument is None:
        return Versioning("full")
    if kind == "cdc" and argument is not None and _IDENTIFIER.fullmatch(argument):
        return Versioning("cdc", column=argument)
    if kind == "append_only_partitions" and argument is None:
        return Versioning("append_only_partitions")
    if kind in ("sliding_window", "partition_expiry") and argument is not None and argument.isdigit():
        return Versioning(kind, window=int(argument))  # type: ignore[arg-type]  # one of the kinds just tested
    raise _bad_value(
        prop,
        "full, cdc(column), append_only_partitions, sliding_window(N), partition_expiry(N), "
        "ledger(txn_column, committed_at_column, kind_column) or feed(position_column[, arrival_column])",
        "cdc(updated_at)",
    )


def as_count(prop: RawProperty) -> int:
    value = _needs_value(prop, "1")
    if not value.text.isdigit():
        raise _bad_value(prop, "a whole number of partitions", "1")
    return int(value.text)


def as_on_violation(prop: RawProperty) -> str:
    value = _needs_value(prop, "error")
    if value.text not in ON_VIOLATIONS:
        raise StrataError(
            E_PROPERTY_VALUE,
            f"`on_violation` expects {' or '.join(ON_VIOLATIONS)}, got `{value.text}`",
            value.location,
            hint="write `on_violation: error` (stop and say what broke) or `on_violation: rebuild` "
            "(rebuild from the source as it is now)" + _did_you_mean(value.text, ON_VIOLATIONS),
        )
    return value.text


def as_interval(prop: RawProperty) -> str:
    text = as_string(prop)
    if not re.fullmatch(r"\s*\d+\s+(second|minute|hour|day)s?\s*", text, re.IGNORECASE):
        raise _bad_value(prop, "an interval such as '10 minutes'", "'10 minutes'")
    return text.strip()


def as_contract(prop: RawProperty) -> tuple[ContractColumn, ...]:
    value = _needs_value(prop, "{id: BIGINT not null, amount: DOUBLE}")
    if value.entries is None:
        raise _bad_value(prop, "a mapping of column to type", "{id: BIGINT not null, amount: DOUBLE}")
    columns = []
    for name, entry in value.entries:
        match = _CONTRACT_TYPE.fullmatch(entry.text.strip())
        if not match or entry.entries is not None:
            raise _bad_value(prop, "a mapping of column to type", "{id: BIGINT not null}")
        type_name = match.group("type").strip()
        if not is_type(type_name):
            raise StrataError(
                E_PROPERTY_VALUE,
                f"`{type_name}` (contract of column `{name}`) is not a DuckDB type",
                entry.location,
                hint="write a type, then `not null` if wanted: `{id: BIGINT not null, amount: DECIMAL(18, 2)}`",
            )
        columns.append(ContractColumn(name, type_name.upper(), bool(match.group("not_null")), entry.location))
    return tuple(columns)


def as_merge_strategy(prop: RawProperty) -> str:
    value = _needs_value(prop, "upsert")
    if value.text in MERGE_STRATEGY_ALIASES:
        return MERGE_STRATEGY_ALIASES[value.text]
    if value.text not in MERGE_STRATEGIES:
        raise StrataError(
            E_MERGE_STRATEGY,
            f"unknown merge_strategy `{value.text}`",
            value.location,
            hint=f"use one of {', '.join(MERGE_STRATEGIES)}" + _did_you_mean(value.text, MERGE_STRATEGIES),
        )
    return value.text


def as_refresh(prop: RawProperty) -> str:
    value = _needs_value(prop, "daily")
    if value.text not in REFRESHES:
        raise StrataError(
            E_PROPERTY_VALUE,
            f"`refresh` expects {', '.join(REFRESHES)}, got `{value.text}`",
            value.location,
            hint="write it like `refresh: daily`" + _did_you_mean(value.text, REFRESHES),
        )
    return value.text


_FRESHNESS = re.compile(r"(\d+)\s*(minute|hour|day|week)s?", re.IGNORECASE)
_FRESHNESS_UNITS = {"minute": 60, "hour": 3_600, "day": 86_400, "week": 604_800}


def as_freshness(prop: RawProperty) -> Freshness:
    """`1 day`, `12 hours`, `30 minutes`, `2 weeks`, bare or quoted; at least a minute, as Dagster
    evaluates freshness no finer."""
    value = _needs_value(prop, "1 day")
    text = value.text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1].strip()
    match = _FRESHNESS.fullmatch(text)
    seconds = int(match.group(1)) * _FRESHNESS_UNITS[match.group(2).lower()] if match else 0
    if seconds < 60:
        raise StrataError(
            E_FRESHNESS,
            f"`freshness` expects a duration of at least a minute, got `{value.text}`",
            value.location,
            hint="write it like `freshness: 1 day`, `freshness: 12 hours` or `freshness: 30 minutes`",
        )
    return Freshness(seconds, text)


def as_materialize(prop: RawProperty) -> str:
    value = _needs_value(prop, "view")
    if value.text not in MATERIALIZATIONS:
        raise StrataError(
            E_PROPERTY_VALUE,
            f"`materialize` expects {' or '.join(MATERIALIZATIONS)}, got `{value.text}`",
            value.location,
            hint="write `materialize: view` (a view over the inputs, nothing stored) or `materialize: table`"
            + _did_you_mean(value.text, MATERIALIZATIONS),
        )
    return value.text


def as_table(prop: RawProperty) -> str:
    value = _needs_value(prop, "raw.orders")
    if not _QUALIFIED.fullmatch(value.text):
        raise _bad_value(prop, "a table name such as schema.table", "raw.orders")
    return value.text


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


_SOURCE_PROPERTIES: dict[str, tuple[str, Callable[[RawProperty], object]]] = {
    "table": ("table", as_table),
    "database": ("database", as_string),
    "path": ("path", as_string),
    "partitioned_by": ("partitioned_by", as_partition),
    "start": ("start", as_partition_start),
    "versioning": ("versioning", as_versioning),
    "key": ("key", as_names),
    "immutable_partitions": ("is_immutable_partitions", as_bool),
    "monotonic_partitions": ("is_monotonic_partitions", as_bool),
    "complete_when": ("complete_when", as_string),
    "settle": ("settle", as_count),
    "on_violation": ("on_violation", as_on_violation),
    "description": ("description", as_string),
    "ledger": ("ledger", as_table),
    "feed_keys": ("feed_keys", as_names),
    "deletes": ("deletes", as_deletes),
}

_MODEL_PROPERTIES: dict[str, tuple[str, Callable[[RawProperty], object]]] = {
    "incremental": ("is_incremental", as_bool),
    "merge_strategy": ("merge_strategy", as_merge_strategy),
    "merge_keys": ("merge_keys", as_names),
    "cdc_column": ("cdc_column", as_name),
    "check_columns": ("check_columns", as_names),
    "deleted_flag": ("deleted_flag", as_name),
    "lateness": ("lateness", as_interval),
    "partitioned_by": ("partitioned_by", as_partition),
    "unique": ("unique", as_names),
    "contract": ("contract", as_contract),
    "order_by": ("order_by", as_names),
    "refresh": ("refresh", as_refresh),
    "materialize": ("materialize", as_materialize),
    "description": ("description", as_string),
    "tags": ("tags", as_tags),
    "owners": ("owners", as_owners),
    "freshness": ("freshness", as_freshness),
}

_FLAGS = {"incremental", "immutable_partitions", "monotonic_partitions"}


def _collect(
    owner: str, raw: list[RawProperty], known: dict[str, tuple[str, Callable[[RawProperty], object]]]
) -> tuple[dict[str, object], list[StrataError]]:
    values: dict[str, object] = {}
    errors: list[StrataError] = []
    seen: set[str] = set()
    for prop in raw:
        if prop.name not in known:
            errors.append(
                StrataError(
                    E_PROPERTY,
                    f"{owner} has no property `{prop.name}`",
                    prop.location,
                    hint=f"known properties: {', '.join(known)}" + _did_you_mean(prop.name, list(known)),
                )
            )
            continue
        if prop.name in seen:
            errors.append(StrataError(E_PROPERTY, f"`{prop.name}` is set twice", prop.location))
            continue
        seen.add(prop.name)
        if prop.value is None and prop.name not in _FLAGS:
            errors.append(_bad_value(prop, "a value", "..."))
            continue
        field_name, convert = known[prop.name]
        try:
            values[field_name] = convert(prop)
        except StrataError as error:
            errors.append(error)
    return values, errors


def build_model_properties(model: str, raw: list[RawProperty]) -> ModelProperties:
    values, errors = _collect(f"model `{model}`", raw, _MODEL_PROPERTIES)
    raise_collected(errors)
    locations = tuple((prop.name, prop.value.location if prop.value else prop.location) for prop in raw)
    return ModelProperties(**values, locations=locations)  # type: ignore[arg-type]  # each value checked above


def build_source(name: str, location: Location, raw: list[RawProperty]) -> Source:
    values, errors = _collect(f"source `{name}`", raw, _SOURCE_PROPERTIES)
    raise_collected(errors)
    where = {prop.name: prop.location for prop in raw}
    source = Source(name=name, location=location, start_location=where.get("start"), **values)  # type: ignore[arg-type]  # each value checked above
    raise_collected(_source_errors(source, where))
    return source


def _log_property_errors(source: Source, where: dict[str, Location]) -> list[StrataError]:
    """A ledger needs its transactions' relation, a feed its key; neither property means anything
    on another versioning."""
    kind, here = source.versioning.kind, where.get("versioning", source.location)
    wanted = {"ledger": ("ledger",), "feed": ("feed_keys", "deletes")}
    errors = [
        StrataError(
            E_LOG_SOURCE,
            f"source `{source.name}` sets `{name}` but is not `versioning: {owner}(...)`",
            where[name],
            hint=f"`{name}` belongs to `versioning: {owner}(...)` sources; remove it or declare the versioning",
        )
        for owner, names in wanted.items()
        if kind != owner
        for name in names
        if name in where
    ]
    if kind == "ledger" and source.ledger is None:
        errors.append(
            StrataError(
                E_LOG_SOURCE,
                f"source `{source.name}` is `versioning: ledger(...)` but names no `ledger:` relation",
                here,
                hint="add `ledger: schema.transactions`, the table of its transactions (id, committed_at, kind)",
            )
        )
    if kind == "feed" and not source.feed_keys:
        errors.append(
            StrataError(
                E_LOG_SOURCE,
                f"source `{source.name}` is `versioning: feed(...)` but names no `feed_keys`",
                here,
                hint="add `feed_keys: [id]`, the columns identifying the row each change applies to",
            )
        )
    if source.is_log and (source.path is not None or source.partitioned_by is not None):
        errors.append(
            StrataError(
                E_LOG_SOURCE,
                f"source `{source.name}` is `versioning: {kind}(...)` over files or partitions",
                here,
                hint="a ledger or change feed is a table source (`table:`) without `partitioned_by`",
            )
        )
    return errors


def _source_errors(source: Source, where: dict[str, Location]) -> list[StrataError]:
    errors = []
    here = source.location
    if source.path is not None and (source.table is not None or source.database is not None):
        errors.append(
            StrataError(
                E_SOURCE,
                f"source `{source.name}` sets `path` together with `table` or `database`",
                where.get("path", here),
                hint="a source is either files (`path`) or a table (`table`, optionally in `database`)",
            )
        )
    if source.partitioned_by is not None and source.start is None:
        errors.append(
            StrataError(
                E_SOURCE,
                f"partitioned source `{source.name}` has no `start`",
                where.get("partitioned_by", here),
                hint="add `start: YYYY-MM-DD`, the first partition (an integer for an integer column)",
            )
        )
    if source.start is not None and source.partitioned_by is None:
        errors.append(
            StrataError(
                E_SOURCE,
                f"source `{source.name}` sets `start` but is not partitioned",
                where.get("start", here),
                hint="add `partitioned_by: day(column)` or remove `start`",
            )
        )
    errors.extend(_business_property_errors(source, where))
    errors.extend(_log_property_errors(source, where))
    kind = source.versioning.kind
    if kind in ("append_only_partitions", "sliding_window", "partition_expiry"):
        if source.partitioned_by is None:
            errors.append(
                StrataError(
                    E_SOURCE,
                    f"`versioning: {kind}` on source `{source.name}` needs `partitioned_by`",
                    where.get("versioning", here),
                    hint="business-driven versioning derives deltas from partitions; declare them",
                )
            )
        missing = [
            gate
            for gate, declared in (
                ("immutable_partitions", source.is_immutable_partitions),
                ("monotonic_partitions", source.is_monotonic_partitions),
            )
            if not declared
        ]
        if missing:
            errors.append(
                StrataError(
                    E_SOURCE,
                    f"`versioning: {kind}` on source `{source.name}` relies on assumptions it does not declare: "
                    + ", ".join(missing),
                    where.get("versioning", here),
                    hint="declare "
                    + " and ".join(f"`{gate}: true`" for gate in missing)
                    + " if they hold, otherwise use `versioning: full`",
                )
            )
    return errors


def _business_property_errors(source: Source, where: dict[str, Location]) -> list[StrataError]:
    """`complete_when`, `settle` and `on_violation` belong to business-driven versioning only, and
    a completeness marker to files only."""
    errors = []
    for name in ("complete_when", "settle", "on_violation"):
        if name in where and not source.is_business_versioned:
            errors.append(
                StrataError(
                    E_SOURCE,
                    f"source `{source.name}` sets `{name}` but is not versioned by its partitions",
                    where[name],
                    hint="use it with `versioning: append_only_partitions` (or sliding_window / partition_expiry)",
                )
            )
    if "complete_when" in where and source.path is None:
        errors.append(
            StrataError(
                E_SOURCE,
                f"source `{source.name}` sets `complete_when` but reads a table, not files",
                where["complete_when"],
                hint="a table's partition is complete when later ones exist: use `settle: N`",
            )
        )
    return errors
