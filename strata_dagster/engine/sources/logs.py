"""A source that comes with its change log, as a build reads it: its rows, its window, its gate.

A ledger source (`versioning: ledger(txn, committed_at, kind)`, engine.sources.ledger) and a change
feed (`versioning: feed(position)`, engine.sources.feed) both say which raw rows a window (low, high]
brought, with high frozen at build start; this module holds what the two share and picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.errors import E_BACKEND_UNSUPPORTED, E_HISTORY_SOURCE, E_SOURCE, StrataError
from strata_dagster.fingerprint import digest
from strata_dagster.language.definition import HISTORY_COLUMNS, Model, Project, Source
from strata_dagster.sql.render import render
from strata_dagster.sql.segments import typed_literal

# What a build records of a log source for its next delta: the raw relation it read, and how many
# raw rows lay at or below its high (the next build's low).
LOG_RELATION = "log_relation"
LOG_NEXT_COUNT = "log_next_count"


class LogSource(Protocol):
    """A ledger or a change feed, as the build of a model reading it sees it."""

    @property
    def source(self) -> Source:
        """The source declaring the log."""
        ...

    @property
    def table(self) -> exp.Table:
        """The raw rows, as stored (a ledger's rows, a feed's events)."""
        ...

    def relation(self) -> exp.Query:
        """The rows a model reads from the source (what a full build computes over)."""
        ...

    def versions(
        self,
        keys: tuple[str, ...],
        checked: tuple[str, ...] = (),
        deleted_flag: str | None = None,
        only: Callable[[str], exp.Expr] | None = None,
    ) -> exp.Query:
        """The rows as versions of `keys` (what a history model reads, engine.sources.versions);
        `only` (a predicate over the raw rows of a qualifier) keeps the events of the keys it
        holds: a key's versions read its events alone."""
        ...

    def high(self, session: Session) -> tuple[str | None, str]:
        """The window's upper bound as text and its type, read at build start (None: empty log)."""
        ...

    def in_window(self, low: exp.Expr | None, high: exp.Expr, qualifier: str | None = None) -> exp.Expr:
        """Whether a raw row (of `qualifier`, or unqualified) was brought by the window (low, high]."""
        ...

    def stamps(self) -> tuple[exp.Query | exp.Table, exp.Expr]:
        """A relation with one row per raw row, and the column placing it in the log's windows."""
        ...

    def checked_window(self, session: Session, low: exp.Expr, high: exp.Expr) -> str | None:
        """Why the window (low, high] gives no delta (the build is full), or None; raises what
        must stop the build."""
        ...


@dataclass(frozen=True)
class LogFacts:
    """The window a build of a model over a log source reads."""

    high: str | None
    high_type: str
    next_count: int  # raw rows at or below `high`

    def as_detail(self, relation: exp.Table) -> dict[str, object]:
        return {
            "high": self.high,
            "cdc_type": self.high_type,
            LOG_RELATION: render(relation),
            LOG_NEXT_COUNT: self.next_count,
        }


def log_source(
    session: Session, project: Project, overrides: Mapping[str, str], name: str
) -> LogSource | None:
    """The log of source `name` (None when it declares none, or is read through an override)."""
    source = project.sources.get(name)
    if source is None or not source.is_log or name in overrides:
        return None
    from strata_dagster.engine.sources.feed import Feed  # read only for a log source
    from strata_dagster.engine.sources.ledger import Ledger

    if session.backend != "duckdb":
        raise StrataError(
            E_BACKEND_UNSUPPORTED,
            f"source `{name}` is `versioning: {source.versioning.kind}(...)`, which the {session.backend} "
            "backend does not build",
            source.location,
            hint="ledger and change-feed sources are built on DuckDB; use the duckdb engine, or "
            "`versioning: full` on this backend",
        )
    table = source_table(source, project, {})
    if source.versioning.kind == "ledger":
        assert source.ledger is not None  # the language refuses a ledger source without it
        return Ledger(source, table, source_table(replace(source, table=source.ledger), project, {}))
    return Feed(source, table)


def history_keys(
    model: Model, base: str, traced: tuple[str | None, ...], log: LogSource | None, *, is_source: bool = True
) -> tuple[str, ...]:
    """The columns of `base` history model `model` keeps versions of (its merge keys `traced` to
    them), or E092: a change feed's versions are of its feed keys, a ledger's or a plain table's
    of any traced keys; a model is no source of versions."""
    from strata_dagster.engine.sources.feed import Feed, history_source_error

    if log is None and not is_source:
        raise history_source_error(model, base)
    if isinstance(log, Feed):
        if set(traced) != set(log.keys):
            raise history_source_error(model, base, log.keys)
        return log.keys
    if None in traced:
        raise history_source_error(model, base, ())
    return tuple(key for key in traced if key is not None)


def table_history_error(
    model: Model, base: str, traced: dict[str, str | None], backend: str
) -> StrataError | None:
    """Why history model `model` cannot be kept over plain table `base` (its output columns
    `traced` to `base`'s), if it cannot: the engine closes versions by the history columns' names."""
    if backend != "duckdb":
        return StrataError(
            E_BACKEND_UNSUPPORTED,
            f"model `{model.name}` keeps a history of plain table `{base}`, which the {backend} backend does not build",
            model.properties.location_of("merge_strategy") or model.location,
            hint="history models are built on DuckDB; use the duckdb engine",
        )
    wanted = [*HISTORY_COLUMNS, *filter(None, [model.properties.deleted_flag])]
    if missing := [name for name in wanted if traced.get(name) != name]:
        return StrataError(
            E_HISTORY_SOURCE,
            f"model `{model.name}` keeps a history of plain table `{base}` but does not select "
            f"`{missing[0]}` unchanged: a build closes versions by that column",
            model.properties.location_of("merge_strategy") or model.location,
            hint=f"select {', '.join(wanted)} as they are (filters and other columns may compute anything)",
        )
    checked = [name for name in model.properties.check_columns or () if name not in traced]
    if checked:
        return StrataError(
            E_HISTORY_SOURCE,
            f"model `{model.name}` keeps a history of plain table `{base}` checking `{checked[0]}`, which it does "
            "not output: a build compares its current versions with the table by the checked columns",
            model.properties.location_of("check_columns") or model.location,
            hint="select the checked columns, or check others",
        )
    return None


def history_relation(
    model: Model, keys: tuple[str, ...], log: LogSource, only: Callable[[str], exp.Expr] | None = None
) -> exp.Query:
    """What history model `model` reads from its `from` log: its versions by `keys` (of the keys
    `only` keeps)."""
    props = model.properties
    return log.versions(keys, props.check_columns or (), props.deleted_flag, only)


def read_facts(session: Session, log: LogSource) -> LogFacts:
    """The window's high, read now, and the raw rows at or below it."""
    high, high_type = log.high(session)
    if high is None:
        return LogFacts(None, high_type, 0)
    (count,) = counts_at_or_below(session, log, [typed_literal(high, high_type)])
    return LogFacts(high, high_type, count)


def counts_at_or_below(session: Session, log: LogSource, bounds: list[exp.Expr]) -> list[int]:
    """How many raw rows the log places at or below each bound, in one scan."""
    relation, stamp = log.stamps()
    return session.counts_at_or_below(relation, stamp, bounds)


def with_ledger(session: Session, project: Project, source: Source, fingerprint: str) -> str:
    """A ledger source's identity: its rows' figures and its ledger's, so a transaction the ledger
    gained (even one whose rows are gone) makes its models stale."""
    assert source.ledger is not None  # the language refuses a ledger source without it
    ledger = source_table(replace(source, table=source.ledger), project, {})
    try:
        content = session.content(ledger)
    except WarehouseError as error:
        raise StrataError(
            E_SOURCE,
            f"the ledger of source `{source.name}` cannot be read from `{render(ledger)}`: {error}",
            source.location,
            hint="`ledger:` names the table of the source's transactions (id, committed_at, kind)",
        ) from None
    return digest("ledger", fingerprint, content.fingerprint)
