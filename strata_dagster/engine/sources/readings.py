"""Read-only questions an orchestrator asks: source fingerprints, model fingerprints, live state.

The Dagster layer maps these onto DataVersions (sources), code versions (models) and data
versions of materializations (snapshot content), so Dagster's staleness equals the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.choice import backend_version
from strata_dagster.backends.duckdb.sources import file_pattern, source_table
from strata_dagster.backends.file_stamps import FileStamp
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema, source_database_path
from strata_dagster.engine.context import ProjectContext, load_context
from strata_dagster.engine.sources.logs import with_ledger
from strata_dagster.errors import E_SOURCE, StrataError
from strata_dagster.fingerprint import HASH_VERSION, ModelFingerprint, model_fingerprint
from strata_dagster.language.definition import Source
from strata_dagster.sql.content import WHOLE_ROW, Content, RowBasis, is_summed
from strata_dagster.sql.render import render
from strata_dagster.state.states import state_tables

PartitionGroups = dict[str | None, tuple[int, str]]  # a key's value -> its rows' count and hash sum


@dataclass(frozen=True)
class SourceState:
    name: str
    relation: str
    fingerprint: str
    row_count: int
    row_hash_sum: str | None = None  # the rows' hash sum (or change-column range) behind the fingerprint
    row_basis: RowBasis = WHOLE_ROW  # what the figures cover
    # Read through an override whose rows differ from the source's own table: the figures are
    # whole-row, and no delta computed against the source's own watermark applies.
    is_replaced: bool = False
    # The settled stamp of the source's database file a scan read these figures under, when no
    # record had them yet (`record_stamps` keeps them for the next read).
    unrecorded_stamp: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ModelState:
    """What a model's live view exposes on a branch (None fields: never published)."""

    name: str
    fingerprint: str
    snapshot_ids: tuple[str, ...]
    content_hash: str | None
    row_count: int | None


def fingerprint_models(context: ProjectContext) -> dict[str, ModelFingerprint]:
    """Every model's fingerprint, in dependency order (upstream fingerprints feed downstream ones)."""
    fingerprints: dict[str, ModelFingerprint] = {}
    project = context.project
    for name in project.order:
        upstream = {ref: fingerprints[ref].value for ref in project.upstream_models(name)}
        compiled = context.compiled.models[name]
        fingerprints[name] = model_fingerprint(project.models[name], compiled, upstream, backend_version())
    return fingerprints


def source_basis(source: Source | None) -> RowBasis:
    """What a source's content figures cover to tell what changed: the whole row (`versioning:
    full`, and every model), or the change column's range alone (`versioning: cdc(col)`)."""
    if source is not None and source.versioning.kind == "cdc" and source.versioning.column:
        return (source.versioning.column,)
    if source is not None and source.versioning.kind == "ledger" and source.versioning.txn_column:
        return (source.versioning.txn_column,)  # with the ledger's own figures (read_source_state)
    if source is not None and source.versioning.kind == "feed" and source.versioning.column:
        return (source.versioning.arrival_column or source.versioning.column,)
    return WHOLE_ROW


def unreadable_source(source: Source, relation: exp.Table, error: WarehouseError | str) -> StrataError:
    return StrataError(
        E_SOURCE,
        f"source `{source.name}` cannot be read from `{render(relation)}`: {error}",
        source.location,
        hint=unreadable_source_hint(source),
    )


def unreadable_source_hint(source: Source) -> str:
    """What to do about a source that cannot be read, for the kind of source it is."""
    if source.path is not None:
        return "fix `path:` (relative paths start at the project folder), or put the files it names there"
    if source.database is not None:
        return "fix `database:` or `table:`: the table must be in that DuckDB file"
    return "load the table first (e.g. `strata sample-data PROJECT` for the example) or fix `table:`"


def checked_basis(source: Source, relation: exp.Table, columns: tuple[tuple[str, str], ...]) -> RowBasis:
    """The source's basis, once `columns` (its table's, as described) are known to hold it: a
    clear E_SOURCE if not."""
    basis = source_basis(source)
    names = {name for name, _ in columns}
    missing = [column for column in basis if column not in names]
    if missing:
        kind = source.versioning.kind
        declared = (
            f"`versioning: cdc({missing[0]})`"
            if kind == "cdc"
            else f"`versioning: {kind}(...)` over `{missing[0]}`"
        )
        raise StrataError(
            E_SOURCE,
            f"source `{source.name}` declares {declared} but `{render(relation)}` has no column `{missing[0]}`",
            source.location,
            hint=f"name the table's change column in `{source.versioning.kind}(...)`, or use `versioning: full`",
        )
    return basis


def _described(session: Session, source: Source, relation: exp.Table) -> tuple[tuple[str, str], ...]:
    try:
        return session.describe(relation)
    except WarehouseError as error:
        raise unreadable_source(source, relation, error) from None


def _state(name: str, relation: exp.Table, content: Content, is_replaced: bool = False) -> SourceState:
    return SourceState(
        name,
        render(relation),
        content.fingerprint,
        content.row_count,
        content.row_hash_sum,
        content.basis,
        is_replaced,
    )


@dataclass(frozen=True)
class _Reading:
    """How a run reads a source: from which relation, with which columns, hashed over what."""

    relation: exp.Table
    columns: tuple[tuple[str, str], ...]
    basis: RowBasis
    is_replaced: bool
    whole: Content | None = None  # the relation's whole-row content, when the choice needed it
    stamp: str | None = None  # the settled stamp of the files it reads, when figures under it count
    recorded: Content | None = None  # the figures a scan under that same stamp read

    def scanned(self, name: str, content: Content) -> SourceState:
        """The state a scan of this reading gave, with the stamp to record it under."""
        state = _state(name, self.relation, content, self.is_replaced)
        return state if self.stamp is None else replace(state, unrecorded_stamp=self.stamp)


def _figures_engine() -> str:
    """What computes a source's figures: a record made by another version is not taken."""
    return f"{HASH_VERSION}/{backend_version()}"


def _stamped(session: Session, context: ProjectContext, name: str, reading: _Reading) -> _Reading:
    """`reading` (of a source's own table: no override) with the stamp of the files its source
    reads (a DuckDB database file, or every file a `path:` pattern reaches), and the figures a
    scan read under it when the history has them: whole-row figures only (a change column's
    figures come from statistics, without a scan)."""
    if not is_summed(reading.basis):
        return reading
    stamp = _source_stamp(session, context, name, reading.relation)
    if stamp is None or not stamp.is_settled:
        return reading
    figures = session.history.source_stamp_figures(
        name, render(reading.relation), _figures_engine(), stamp.text
    )
    if figures is None:
        return replace(reading, stamp=stamp.text)
    recorded = Content(reading.columns, figures[0], figures[1], reading.basis)
    return replace(reading, stamp=stamp.text, recorded=recorded)


def _source_stamp(
    session: Session, context: ProjectContext, name: str, relation: exp.Table
) -> FileStamp | None:
    source = context.project.sources[name]
    if source.path is not None:
        return session.source_files_stamp(file_pattern(source, context.project))
    path = source_database_path(source, context.project.root)
    return None if path is None else session.source_file_stamp(relation, path)


def recheck_stamped(
    session: Session, context: ProjectContext, name: str
) -> tuple[tuple[int, str], tuple[int, str]] | None:
    """The figures a read of source `name` takes from the record of its files' stamp, and those a
    scan reads now; None when no record covers the file as it is. A record the scan contradicts
    (a file system that kept a file's times through a write) is superseded by what the scan read,
    so that the next run sees the rows as they are."""
    reading = _reading(session, context, name)
    if reading.recorded is None or reading.stamp is None:
        return None
    try:
        content = session.content(reading.relation, reading.basis, reading.columns)
    except WarehouseError as error:
        raise unreadable_source(context.project.sources[name], reading.relation, error) from None
    recorded = (reading.recorded.row_count, reading.recorded.row_hash_sum)
    now = (content.row_count, content.row_hash_sum)
    if now != recorded:
        record_stamps(session, [reading.scanned(name, content)])
    return recorded, now


def record_stamps(session: Session, states: Iterable[SourceState]) -> None:
    """Keep the figures of every state a scan read under a settled stamp of its source's file, for
    the next read to take without a scan. Its own transaction: a run that publishes nothing
    records them too."""
    rows = [
        (
            state.name,
            state.relation,
            _figures_engine(),
            state.unrecorded_stamp,
            state.row_count,
            state.row_hash_sum,
        )
        for state in states
        if state.unrecorded_stamp is not None and state.row_hash_sum is not None
    ]
    if not rows:
        return
    with session.transaction():
        session.writer.add_source_stamps(rows)


def _reading(session: Session, context: ProjectContext, name: str) -> _Reading:
    """A correction (`--source s=t`) replaces a relation, so it is compared by whole rows whatever
    the source's declared versioning: a corrected row whose change column did not advance still
    counts. An override holding exactly the rows of the source's own table changes nothing: it
    keeps the declared basis, so its identity is the one the source's own table has."""
    source = context.project.sources[name]
    relation = source_table(source, context.project, context.overrides)
    columns = _described(session, source, relation)
    declared = checked_basis(source, relation, columns)
    if name not in context.overrides:
        return _stamped(session, context, name, _Reading(relation, columns, declared, False))
    try:
        corrected = session.content(relation, WHOLE_ROW, columns)
    except WarehouseError as error:
        raise unreadable_source(source, relation, error) from None
    try:
        own = session.content(source_table(source, context.project, {}), WHOLE_ROW)
    except WarehouseError:
        return _Reading(relation, columns, WHOLE_ROW, True, corrected)  # nothing to be equal to
    if own.fingerprint == corrected.fingerprint:
        return _Reading(relation, columns, declared, False, corrected)
    return _Reading(relation, columns, WHOLE_ROW, True, corrected)


def read_source_state(session: Session, context: ProjectContext, name: str) -> SourceState:
    source = context.project.sources[name]
    if source.is_business_versioned and name not in context.overrides and source.partitioned_by is not None:
        # Versioned by its partition ledger: what the next run would record, no row read.
        from strata_dagster.engine.sources import business  # only a business-versioned source

        fingerprint, rows = business.observed_version(session, context, name)
        relation = source_table(source, context.project, {})
        return SourceState(name, render(relation), fingerprint, rows, None, (source.partitioned_by.column,))
    reading = _reading(session, context, name)
    return _read_state(session, context, name, reading)


def _read_state(session: Session, context: ProjectContext, name: str, reading: _Reading) -> SourceState:
    source = context.project.sources[name]
    if reading.whole is not None and reading.basis == WHOLE_ROW:
        return _state(name, reading.relation, reading.whole, reading.is_replaced)
    if reading.recorded is not None:
        return _state(name, reading.relation, reading.recorded)
    try:
        content = session.content(reading.relation, reading.basis, reading.columns)
    except WarehouseError as error:
        raise unreadable_source(source, reading.relation, error) from None
    state = reading.scanned(name, content)
    if source.versioning.kind != "ledger" or name in context.overrides:
        return state
    return replace(state, fingerprint=with_ledger(session, context.project, source, state.fingerprint))


def read_source_state_by_group(
    session: Session, context: ProjectContext, name: str, key: exp.Expr
) -> tuple[SourceState, Callable[[], PartitionGroups]]:
    """The source's state, and how to read its rows' content figures per value of `key`. Where
    row-hash sums add up to the whole table's figures (the same row hash), one scan gives both,
    read now. A change column's figures (count and range) do not add up: the state is read alone
    (from DuckDB's statistics, a few milliseconds), and the grouped scan only when a model builds,
    so a run that reuses every model reading the source never scans it by group."""
    source = context.project.sources[name]
    reading = _reading(session, context, name)
    relation, basis = reading.relation, reading.basis

    def grouped() -> PartitionGroups:
        try:
            return session.content_by_group(relation, key, basis)
        except WarehouseError as error:
            raise unreadable_source(source, relation, error) from None

    if not is_summed(basis):
        try:
            content = session.content(relation, basis, reading.columns)
        except WarehouseError as error:
            raise unreadable_source(source, relation, error) from None
        return _state(name, relation, content, reading.is_replaced), grouped
    if reading.recorded is not None:
        return _state(name, relation, reading.recorded), grouped  # grouped only if a model builds
    groups = grouped()
    content = Content(
        reading.columns,
        sum(count for count, _ in groups.values()),
        str(sum(int(hash_sum) for _, hash_sum in groups.values())),
        basis,
    )
    return reading.scanned(name, content), lambda: groups


def read_source_state_by_figures(
    session: Session,
    context: ProjectContext,
    name: str,
    figures: Callable[[exp.Table, RowBasis], exp.Query],
    sums: tuple[str, str],
) -> tuple[SourceState, tuple[str, exp.Table] | None]:
    """The source's state, and its rows' figures per group (`figures(relation, basis)`, whose
    columns `sums` are each group's row count and row-hash sum) held for the session where they
    add up to the whole table's figures: one scan gives both, the figures rendered as the query
    they answer. Else (a change-column basis, a backend that holds nothing) the state alone."""
    reading = _reading(session, context, name)
    if not is_summed(reading.basis) or reading.whole is not None or reading.recorded is not None:
        # The model's build scans its figures itself, if it builds.
        return _read_state(session, context, name, reading), None
    source = context.project.sources[name]
    query = figures(reading.relation, reading.basis)
    try:
        held = session.held_rows(("source figures", render(query)), lambda: query.copy())
        if not isinstance(held, exp.Table):
            return _read_state(session, context, name, reading), None
        totals = exp.select(
            *(
                exp.func("coalesce", exp.func("sum", exp.column(column)), exp.Literal.number(0))
                for column in sums
            )
        ).from_(held.copy())
        _, rows = session.read_rows(totals)
    except WarehouseError as error:
        raise unreadable_source(source, reading.relation, error) from None
    content = Content(reading.columns, int(rows[0][0]), str(rows[0][1]), reading.basis)
    return reading.scanned(name, content), (render(query), held)


def observe_sources(
    project_dir: Path | str,
    warehouse: Path | str,
    names: list[str] | None = None,
    *,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, SourceState]:
    """Content fingerprints of the named sources (all when None). Writes nothing but migrations
    and the records of its scans of settled source files, which the next run then takes."""
    with open_session(Path(warehouse)) as session:
        context = load_context(session, Path(project_dir), overrides or {})
        wanted = names if names is not None else sorted(context.project.sources)
        states = {name: read_source_state(session, context, name) for name in wanted}
        record_stamps(session, states.values())
        return states


def peek_source_fingerprints(
    project_dir: Path | str, warehouse: Path | str, names: list[str], *, timeout: float
) -> dict[str, str]:
    """The content fingerprints of the named sources, read without writing (no migrations either),
    waiting at most `timeout` seconds for a writer's lock (E021 after that): what a sensor checks
    before launching an observation."""
    with open_session(Path(warehouse), read_only=True, timeout=timeout) as session:
        context = load_context(session, Path(project_dir), {})
        return {name: read_source_state(session, context, name).fingerprint for name in names}


def model_states(
    project_dir: Path | str, warehouse: Path | str, branch: str = DEFAULT_BRANCH
) -> dict[str, ModelState]:
    """Each model's current fingerprint and what its live view exposes on `branch`."""
    with open_session(Path(warehouse)) as session:
        context = load_context(session, Path(project_dir), {}, branch)
        fingerprints = fingerprint_models(context)
        pointers = session.history.pointers(branch)
        states = {}
        for name in context.project.order:
            ids = pointers.get(name, ())
            head = session.history.snapshot(ids[-1]) if ids else None
            is_live = head is not None and session.view_tables(branch_schema(branch), name) == state_tables(
                session.history, head
            )
            content = head.content_hash if is_live and head is not None else None
            rows = head.row_count if is_live and head is not None else None
            states[name] = ModelState(
                name, fingerprints[name].value, tuple(ids) if is_live else (), content, rows
            )
        return states


def peek_live_contents(
    warehouse: Path | str, models: list[str], branch: str = DEFAULT_BRANCH, *, timeout: float
) -> dict[str, str | None]:
    """The content identity of each model's live view on `branch`, from the history alone (no
    row is read): the head snapshot's content hash when the view exposes it, else None (never
    published, or a view the history does not explain). Read-only, waiting at most `timeout`
    seconds for a writer's lock (E021): what a sensor compares with Dagster's data versions."""
    with open_session(Path(warehouse), read_only=True, timeout=timeout) as session:
        if not session.has_history():
            return dict.fromkeys(models)
        pointers = session.history.pointers(branch)
        contents: dict[str, str | None] = {}
        for name in models:
            ids = pointers.get(name, ())
            head = session.history.snapshot(ids[-1]) if ids else None
            is_live = head is not None and session.view_tables(branch_schema(branch), name) == state_tables(
                session.history, head
            )
            contents[name] = head.content_hash if is_live and head is not None else None
        return contents
