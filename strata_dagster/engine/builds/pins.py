"""A model's pins checked on what its build wrote: `unique` and `contract`, before anything is
published (E_UNIQUE, E_CONTRACT: nothing was published)."""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.backends.base import Session
from strata_dagster.errors import E_CONTRACT, E_UNIQUE, StrataError
from strata_dagster.language.definition import Model
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import keyed_rows
from strata_dagster.sql.views import PinViolation
from strata_dagster.state.history import HistoryReader, SnapshotRecord
from strata_dagster.state.states import merge_keys_of, state_query

# A state's detail key: the `unique` columns its rows were checked to be unique by.
UNIQUE_CHECKED = "unique_checked"


def new_segment(record: SnapshotRecord) -> str:
    """The segment a delta build wrote: the state's last, or, when the build compacted the state,
    the delta segment kept beside the new base (every row the base holds besides it was checked
    by the builds before)."""
    return str(record.detail.get("compacted_delta") or record.table_name)


def check_pins(session: Session, model: Model, table_name: str) -> None:
    """The pins of a model on a whole new snapshot."""
    props = model.properties
    if props.unique:
        _raise_unique(model, session.unique_violation(table_name, props.unique))
    check_contract(session, model, table_name)


def check_delta_pins(session: Session, reader: HistoryReader, model: Model, record: SnapshotRecord) -> None:
    """Pins on a delta. Duplicates need a new row: within the new segment, or against the rows
    it keeps; when the replaced keys (or partitions) are part of the pinned columns, the kept
    rows cannot repeat a new row's value, so the new segment alone is checked."""
    props = model.properties
    segment = new_segment(record)
    if props.unique:
        _raise_unique(model, session.unique_violation(segment, props.unique))
        replaced = set(merge_keys_of(record))
        is_disjoint = record.detail.get("strategy") in ("upsert", "append_new", "partitions") and bool(
            replaced
        )
        if not (is_disjoint and replaced <= set(props.unique)):
            _raise_unique(model, session.unique_violation(_pinned_rows(reader, model, record), props.unique))
    # Columns and types equal the previous state's (checked by the delta): not-null is per row.
    check_contract(session, model, segment)


def unique_checked(model: Model) -> dict[str, object]:
    """What a state records of the `unique` pin its rows were checked by."""
    unique = model.properties.unique
    return {UNIQUE_CHECKED: sorted(unique)} if unique else {}


def check_contract(session: Session, model: Model, table_name: str) -> None:
    props = model.properties
    if not props.contract:
        return
    contract = [(column.name, column.type, column.is_not_null) for column in props.contract]
    violation = session.contract_violation(table_name, contract)
    if violation is not None:
        raise StrataError(
            E_CONTRACT,
            f"model `{model.name}` breaks its `contract`: {violation.message}",
            props.location_of("contract") or model.location,
            hint="fix the model or the contract; nothing was published",
        )


def _pinned_rows(reader: HistoryReader, model: Model, record: SnapshotRecord) -> exp.Query:
    """The rows of a delta's state a duplicate of the `unique` pin can be among: all of them,
    or, when the state it builds on was checked by the same pin (so the rows it keeps are
    unique among themselves), only those sharing a pinned value with the new segment."""
    state = state_query(reader, record)
    unique = sorted(model.properties.unique or ())
    ids = record.detail.get("compacted_after") or record.segment_ids[:-1]
    previous = reader.snapshot(ids[-1]) if ids and record.segment_ids[-1] == record.snapshot_id else None
    if previous is None or previous.detail.get(UNIQUE_CHECKED) != unique:
        return state
    values = [exp.column(column, table="__state") for column in unique]
    segment = exp.select(*(exp.column(column) for column in unique)).from_(
        snapshot_table(new_segment(record))
    )
    return exp.select("*").from_(state.subquery("__state")).where(keyed_rows(unique, values, source=segment))


def _raise_unique(model: Model, violation: PinViolation | None) -> None:
    if violation is None:
        return
    raise StrataError(
        E_UNIQUE,
        f"model `{model.name}` breaks its `unique` pin: {violation.message}",
        model.properties.location_of("unique") or model.location,
        hint="fix the data or the model; nothing was published",
    )
