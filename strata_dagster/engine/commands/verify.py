"""`strata verify`: does each live model hold exactly the rows a full rebuild gives?

The selected models and everything upstream of them are rebuilt fully, in dependency order, from
the sources as they are now, into scratch tables inside a transaction that is always rolled back:
live snapshots, views and history are never touched, and nothing survives even a crash. Each
rebuilt model is then compared with its live view: row counts, row-hash multisets and numeric
totals, per partition for partitioned models (docs/architecture.md, R12).

`append` and `append_new` models keep history a full rebuild cannot give (earlier versions of a
row; the first version of a key; keys since deleted from the source). They are compared in
history mode: rows only in the live result are counted as history, not as differences, and
`append_new` models are compared on their merge keys. Models downstream of them read their live
views, the only definition of that history.

The Dagster asset checks read the same report: `ModelVerification.is_equal` passes or fails a
check, and `as_metadata()` gives its figures.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlglot import exp

from strata_dagster.backends.base import ResourceLimitExceeded, Session, WarehouseError
from strata_dagster.backends.choice import backend_label
from strata_dagster.backends.duckdb.compare import Figures, combine, compare, schema_differences
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema, model_view
from strata_dagster.engine.builds.limits import limit_error
from strata_dagster.engine.builds.partition_range import partition_keys
from strata_dagster.engine.commands.table_history_check import (
    TableHistoryCheck,
    check_versions,
    compared_columns,
    current_versions,
)
from strata_dagster.engine.context import ProjectContext, load_context, select_models, with_upstream
from strata_dagster.engine.damaged_files import damaged_error
from strata_dagster.engine.partition_keys import PartitionRequest, parse_partitions, request_grain
from strata_dagster.engine.sources import business
from strata_dagster.engine.sources.logs import LogSource, history_keys, history_relation, log_source
from strata_dagster.engine.sources.versions import stamped_rows
from strata_dagster.errors import E_BUILD, E_VERIFY_LIVE, E_VERIFY_PARTITIONS, StrataError
from strata_dagster.faults import checkpoint
from strata_dagster.fingerprint.refresh import utc_now
from strata_dagster.language.definition import PartitionSpec
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import partition_key

SCRATCH_PREFIX = "scratch_verify_"
HISTORY_STRATEGIES = ("append", "append_new")
_DATE = exp.DataType.build("DATE")
_VARCHAR = exp.DataType.build("VARCHAR")


@dataclass(frozen=True)
class PartitionVerification:
    """One partition of a partitioned model: its key as text (`2025-02-01`; a month by its first day)."""

    partition: str | None
    figures: Figures

    @property
    def is_equal(self) -> bool:
        return self.figures.is_equal

    def as_metadata(self) -> dict[str, Any]:
        return {"partition": self.partition, **self.figures.as_metadata()}


@dataclass(frozen=True)
class ModelVerification:
    """A model's live view against its full rebuild; `figures` covers every compared partition."""

    model: str
    figures: Figures
    partitioned_by: str | None = None  # e.g. `day(order_day)`
    partitions: tuple[PartitionVerification, ...] = ()
    schema_differences: tuple[str, ...] = ()
    merge_strategy: str = "replace"
    compared_columns: tuple[str, ...] = ()  # empty: whole rows
    # Why a difference may be by design: the live state was built reading a source from another
    # table than this verification does (a backfill's `--source`): "built by backfill ..., which read ...".
    note: str | None = None
    # A history over a plain table: `figures` compare its current versions with the table now,
    # and these are the checks of its versions (engine.commands.table_history_check).
    table_history: TableHistoryCheck | None = None

    @property
    def is_history(self) -> bool:
        """Rows only in the live result are history kept on purpose, not differences."""
        return self.merge_strategy in HISTORY_STRATEGIES

    @property
    def mismatched_partitions(self) -> tuple[str | None, ...]:
        return tuple(part.partition for part in self.partitions if not part.is_equal)

    @property
    def is_equal(self) -> bool:
        is_well_formed = self.table_history is None or self.table_history.is_equal
        return (
            self.figures.is_equal
            and not self.mismatched_partitions
            and not self.schema_differences
            and is_well_formed
        )

    def as_metadata(self) -> dict[str, Any]:
        """Check metadata: plain ints, strings, booleans and JSON-able lists and dicts."""
        metadata = self.figures.as_metadata()
        metadata["is_equal"] = self.is_equal
        metadata["merge_strategy"] = self.merge_strategy
        metadata["compared_columns"] = list(self.compared_columns) or "whole rows"
        if self.partitioned_by is not None:
            metadata["partitioned_by"] = self.partitioned_by
            metadata["partitions_compared"] = len(self.partitions)
            metadata["mismatched_partitions"] = list(self.mismatched_partitions)
        if self.schema_differences:
            metadata["schema_differences"] = list(self.schema_differences)
        if self.note is not None:
            metadata["note"] = self.note
        if self.table_history is not None:
            metadata.update(self.table_history.as_metadata())
            metadata["compared"] = "current versions with the table's rows now"
        return metadata


@dataclass(frozen=True)
class VerifyReport:
    branch: str
    models: tuple[ModelVerification, ...]
    partitions: tuple[str, ...] = ()  # the partition selection as given (empty: all)

    @property
    def is_equal(self) -> bool:
        return all(model.is_equal for model in self.models)

    @property
    def mismatched(self) -> tuple[ModelVerification, ...]:
        return tuple(model for model in self.models if not model.is_equal)

    def model(self, name: str) -> ModelVerification:
        return next(model for model in self.models if model.model == name)


def verify(
    project_dir: Path | str,
    warehouse: Path | str,
    models: Iterable[str] | None = None,
    partitions: Iterable[str] | None = None,
    branch: str = DEFAULT_BRANCH,
    overrides: Mapping[str, str] | None = None,
) -> VerifyReport:
    """Compare the live `models` (default: all) on `branch` with full rebuilds of them.

    `partitions` (`2025-02-01` a day, `2025-02` a month) limits partitioned models to those
    partitions; then, unless `models` names some, only partitioned models are verified.
    `overrides` reads sources from other tables, as `strata run --source` does.
    """
    selection = parse_partitions(partitions or ())
    with open_session(Path(warehouse), must_exist=True) as session:
        context = load_context(session, Path(project_dir), overrides or {}, branch)
        return verify_context(session, context, models, selection)


def verify_context(
    session: Session,
    context: ProjectContext,
    models: Iterable[str] | None,
    partitions: tuple[PartitionRequest, ...] = (),
    today: dt.date | None = None,
) -> VerifyReport:
    """`verify` on an open session and a loaded project (for callers that hold both already).
    `partitions` are checked as `strata run --partitions` checks them (E040), against `today`
    (default: today in UTC)."""
    project = context.project
    requested = tuple(models or ())
    selected = select_models(project, requested)
    if partitions and not requested:
        selected = tuple(name for name in selected if project.models[name].properties.partitioned_by)
        if not selected:
            raise StrataError(
                E_VERIFY_PARTITIONS,
                "`--partitions` was given but no model of the project is partitioned",
                hint="drop `--partitions` to verify whole models",
            )
    by_grain: dict[str, tuple[PartitionRequest, ...]] = {}
    if partitions:
        # The checks `strata run --partitions` makes; a partitioned model the requests do not
        # name (a month model for days) is not compared over no partitions: it is left out.
        keys = partition_keys(session, context, selected, partitions, today or utc_now().date())
        selected = tuple(
            name
            for name in selected
            if name in keys or project.models[name].properties.partitioned_by is None
        )
        by_grain = {
            grain: tuple(request for request in partitions if request.grain == grain)
            for grain in ("day", "month")
        }
    to_rebuild = _rebuild_order(context, selected)
    read_live = {ref for name in to_rebuild for ref in project.upstream_models(name)} - set(to_rebuild)
    _check_live(session, context, (*selected, *sorted(read_live)))
    session.begin()
    try:
        rebuilt = _rebuild(session, context, to_rebuild)
        checkpoint("verify_rebuilt")
        results = tuple(
            _verify_model(session, context, name, rebuilt[name], _requests_of(context, name, by_grain))
            for name in selected
        )
        results = tuple(
            result
            if result.is_equal
            else replace(result, note=_read_elsewhere(session, context, result.model))
            for result in results
        )
    finally:
        session.rollback()  # scratch space never outlives the verification
    return VerifyReport(context.branch, results, tuple(request.text for request in partitions))


def _read_elsewhere(session: Session, context: ProjectContext, name: str) -> str | None:
    """A note when the entry that built the model's live state read one of its sources from another
    table than this verification (`--source` of a backfill): the difference may be that correction."""
    reader = session.history
    live = reader.pointers(context.branch).get(name)
    number = reader.last_build_of(name, live[-1]) if live else None
    entry = reader.entry(number) if number is not None else None
    if entry is None or not entry.overrides:
        return None
    project = context.project
    read = {ref for model in with_upstream(project, [name]) for ref in project.models[model].references}
    elsewhere = {
        source: table
        for source, table in sorted(entry.overrides.items())
        if source in read and context.overrides.get(source) != table
    }
    if not elsewhere:
        return None
    tables = ", ".join(f"`{source}` from `{table}`" for source, table in elsewhere.items())
    again = " ".join(f"--source {source}={table}" for source, table in elsewhere.items())
    return (
        f"built by {entry.kind} {entry.run_id[:12]}"
        f"{f' ({entry.reason})' if entry.reason else ''}, which read {tables}: a rebuild from the "
        f"sources as they are now differs by that correction. Compare with the same: `{again}`; "
        "or correct the source itself and run `strata run --only-stale`"
    )


# -- partitions ---------------------------------------------------------------------------------


def _requests_of(
    context: ProjectContext, name: str, by_grain: Mapping[str, tuple[PartitionRequest, ...]]
) -> tuple[PartitionRequest, ...]:
    """The requests that name partitions of model `name` (days for a day model, months for a month one)."""
    spec = context.project.models[name].properties.partitioned_by
    return by_grain.get(request_grain(spec.grain), ()) if spec is not None else ()


def partition_expression(spec: PartitionSpec) -> exp.Expr:
    """The partition a row belongs to: its day, the first day of its month, or the column itself."""
    return partition_key(exp.column(spec.column), spec.grain)


def partition_predicate(spec: PartitionSpec, requests: tuple[PartitionRequest, ...]) -> exp.Expr:
    """Rows in any of the requested partitions (of the model's grain: `partition_keys` checked them)."""
    key = partition_expression(spec)

    def date(value: dt.date) -> exp.Expression:
        if spec.grain == "key":  # a plain column: compared as its ISO text
            return exp.Literal.string(value.isoformat())
        return exp.cast(exp.Literal.string(value.isoformat()), _DATE)

    if spec.grain == "key":
        key = exp.cast(key, _VARCHAR)
    conditions: list[exp.Expr] = []
    for request in requests:
        # A month model's key is its first day: the months overlapping the request.
        first = request.start.replace(day=1) if spec.grain == "month" else request.start
        conditions.append(
            exp.and_(
                exp.GTE(this=key.copy(), expression=date(first)),
                exp.LT(this=key.copy(), expression=date(request.end)),
            )
        )
    return exp.or_(*conditions)


def describe_partitioning(spec: PartitionSpec) -> str:
    return spec.column if spec.grain == "key" else f"{spec.grain}({spec.column})"


# -- scratch rebuild and comparison -------------------------------------------------------------


def _is_history(context: ProjectContext, name: str) -> bool:
    return context.project.models[name].properties.merge_strategy in HISTORY_STRATEGIES or _is_table_history(
        context, name
    )


def _is_table_history(context: ProjectContext, name: str) -> bool:
    """A history model over a plain table: no log recomputes it (engine.commands.table_history_check)."""
    if context.project.models[name].properties.merge_strategy != "history":
        return False
    source = context.project.sources.get(context.compiled.models[name].base_relation)
    return source is not None and not source.is_log


def _rebuild_order(context: ProjectContext, selected: tuple[str, ...]) -> tuple[str, ...]:
    """The selected models and their upstream, in dependency order, stopping at history models
    that are not selected: those are read from their live views."""
    project = context.project
    needed: set[str] = set()
    stack = list(selected)
    while stack:
        name = stack.pop()
        if name in needed or (name not in selected and _is_history(context, name)):
            continue
        needed.add(name)
        stack.extend(project.upstream_models(name))
    return tuple(name for name in project.order if name in needed)


def _check_live(session: Session, context: ProjectContext, names: tuple[str, ...]) -> None:
    schema = branch_schema(context.branch)
    live = {name: session.view_tables(schema, name) for name in names}
    missing = [name for name, tables in live.items() if tables is None]
    damaged = {
        name: found for name, tables in live.items() if tables and (found := session.damaged_files(tables))
    }
    if damaged:
        raise damaged_error(damaged, context.branch, "compare the live views with full rebuilds")
    if missing:
        raise StrataError(
            E_VERIFY_LIVE,
            f"{', '.join(f'`{name}`' for name in missing)} not published on branch `{context.branch}`:"
            " nothing to compare",
            subject=missing[0],
            hint=f"run `strata run PROJECT --branch {context.branch}` first, or leave them out of --models",
        )


def _rebuild(session: Session, context: ProjectContext, names: tuple[str, ...]) -> dict[str, exp.Table]:
    """Each model rebuilt fully into a scratch table, reading its upstream models' scratch tables."""
    project = context.project
    token = secrets.token_hex(4)  # two verifications in one process never share a scratch name
    tables: dict[str, exp.Table] = {}
    windows = {
        name: window
        for name in project.sources
        if (window := business.ledger_window(session, project, name, context.overrides)) is not None
    }
    logs: dict[str, LogSource] = {}
    for name in project.sources:
        log = log_source(session, project, context.overrides, name)
        if log is not None:
            windows[name] = log.relation()  # a ledger's committed rows, a feed's current rows
            logs[name] = log

    def relation(name: str) -> exp.Table | exp.Query:
        if name in windows:
            return windows[name]
        if name in project.sources:
            return source_table(project.sources[name], project, context.overrides)
        if _is_history(context, name):
            return model_view(name, context.branch)
        return tables[name]

    def versions_of(name: str) -> Callable[[str], exp.Table | exp.Query]:
        """A history model's inputs: its log's versions (engine.sources.versions); over a plain
        table, its rows as versions opened now (what its current versions must be)."""
        model, compiled = project.models[name], context.compiled.models[name]
        base, log = compiled.base_relation, logs.get(compiled.base_relation)
        if _is_table_history(context, name):
            stamped = stamped_rows(relation(base), exp.func("now"), model.properties.deleted_flag)
            return lambda input_name: stamped if input_name == base else relation(input_name)
        traced = tuple(compiled.base_column(key) for key in model.properties.merge_keys or ())
        keys = history_keys(model, base, traced, log)
        assert log is not None  # history_keys refused a model without one
        versions = history_relation(model, keys, log)
        return lambda input_name: versions if input_name == base else relation(input_name)

    for name in names:
        table_name = f"{SCRATCH_PREFIX}{token}_{name}"
        compiled = context.compiled.models[name]
        inputs: Callable[[str], exp.Table | exp.Query] = relation
        if project.models[name].properties.merge_strategy == "history":
            inputs = versions_of(name)
        try:
            session.create_snapshot(table_name, compiled.bound(inputs))
        except ResourceLimitExceeded as error:
            raise limit_error(name, error, project.models[name].location) from None
        except WarehouseError as error:
            raise StrataError(
                E_BUILD,
                f"{backend_label()} rejected model `{name}` while rebuilding it for verification: {error}",
                project.models[name].location,
                hint=f"run `strata compile PROJECT --model {name}` to see the SQL",
            ) from None
        tables[name] = snapshot_table(table_name)
    return tables


def _verify_table_history(
    session: Session, context: ProjectContext, name: str, full: exp.Table, live: exp.Table
) -> ModelVerification:
    """A history over a plain table: its current versions against the table's rows now, and its
    versions' intervals (engine.commands.table_history_check)."""
    model = context.project.models[name]
    current = f"{full.name}__current"
    try:
        session.create_snapshot(current, current_versions(live))
        columns = compared_columns(model, tuple(context.compiled.models[name].columns or ()))
        figures = compare(session, full, snapshot_table(current), columns=columns)[None]
        checked = check_versions(session, model, live)
    except WarehouseError as error:
        raise _live_unreadable(context, name, error) from None
    return ModelVerification(
        name, figures, merge_strategy="history", compared_columns=columns, table_history=checked
    )


def _verify_model(
    session: Session,
    context: ProjectContext,
    name: str,
    full: exp.Table,
    partitions: tuple[PartitionRequest, ...],
) -> ModelVerification:
    live = model_view(name, context.branch)
    props = context.project.models[name].properties
    if _is_table_history(context, name):
        return _verify_table_history(session, context, name, full, live)
    spec = props.partitioned_by
    columns: tuple[str, ...] = ()
    if props.merge_strategy == "append_new" and props.merge_keys:
        columns = tuple(dict.fromkeys([*props.merge_keys, *([spec.column] if spec else [])]))
    key = partition_expression(spec) if spec is not None else None
    where = partition_predicate(spec, partitions) if spec is not None and partitions else None
    try:
        differences = schema_differences(session, full, live)
        by_partition = compare(
            session,
            full,
            live,
            columns=columns or None,
            partition_key=key,
            where=where,
            is_history=props.merge_strategy in HISTORY_STRATEGIES,
        )
    except WarehouseError as error:
        raise _live_unreadable(context, name, error) from None
    if spec is None:
        return ModelVerification(
            name, by_partition[None], None, (), differences, props.merge_strategy, columns
        )
    parts = tuple(PartitionVerification(key, figures) for key, figures in by_partition.items())
    return ModelVerification(
        name,
        combine(part.figures for part in parts),
        describe_partitioning(spec),
        parts,
        differences,
        props.merge_strategy,
        columns,
    )


def _live_unreadable(context: ProjectContext, name: str, error: WarehouseError) -> StrataError:
    return StrataError(
        E_VERIFY_LIVE,
        f"cannot compare model `{name}` with its live view on branch `{context.branch}`: {error}",
        subject=name,
        hint="a broken view is repaired by the next `strata run PROJECT`",
    )
