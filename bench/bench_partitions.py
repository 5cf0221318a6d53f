"""Partition benchmark: a partition-complete incremental build of a day model and a month model
after late updates to 30 old days, against the DuckDB floor of the same work and a full rebuild.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_partitions.py [--rows 10000000] [--repeat 5] [--profile]
    PYTHONPATH=.:bench .venv/bin/python bench/bench_partitions.py --scenario "dimension change" [--rows ...]

The "dimension change" scenario renames the region of a few customers that a day model joins to its
orders: strata must recompute exactly the days holding those customers' orders, against a floor
of hand-written SQL that is told the customers, finds their days and recomputes them.

The three sides run in this process, on the same data, interleaved (the side that goes first
rotates), and each timing is the wall time around one call, connection open and close included.
After every repeat the incremental day and month models are checked against a full recomputation
(row-hash multisets), so a wrong build fails the bench instead of producing a number. See
bench/README.md.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from bench_engine import (
    NARROW,
    Timings,
    add_versioning_argument,
    bench_arguments,
    console,
    copy,
    execute,
    format_best_median,
    format_seconds,
    machine,
    paths_of,
    source_fingerprint,
    timed,
    view,
    with_versioning,
    write_floor,
    write_narrow_source,
)
from rich.table import Table
from sqlglot import exp

import strata_dagster
import strata_dagster.backends.duckdb.opening as duckdb_opening_module
import strata_dagster.backends.duckdb.snapshot_files as snapshot_files_module
import strata_dagster.backends.sql.figures as figures_module
import strata_dagster.backends.sql.key_figures as key_figures_module
import strata_dagster.backends.sql.tables as shared_tables_module
import strata_dagster.engine.run as engine_run
from strata_dagster.backends.base import Session
from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.duckdb.session import DuckDBSession
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.decisions.scope import RunScope
from strata_dagster.engine.run import run_project
from strata_dagster.language import load_project
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, render
from strata_dagster.state.history import HistoryReader, HistoryWriter

PROJECT = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model daily {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  group order_day, channel
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
  unique: [order_day, channel]
}

model monthly {
  from daily
  let order_month = cast(date_trunc('month', order_day) as date)
  group order_month, channel
  aggregate revenue = sum(revenue), n = sum(n), days = count(distinct order_day)
  partitioned_by: month(order_month)
  unique: [order_month, channel]
}
"""
DAILY, MONTHLY = "daily", "monthly"
MODELS = (DAILY, MONTHLY)  # project order
COLUMNS = {
    DAILY: ("order_day", "channel", "revenue", "n"),
    MONTHLY: ("order_month", "channel", "revenue", "n", "days"),
}
PARTITION_COLUMN = {DAILY: "order_day", MONTHLY: "order_month"}

# A full recomputation of both models from raw.orders, written by hand: what verification compares
# with (and the floor's recomputation of the affected days and months, restricted to them).
RECOMPUTE_DAILY = (
    "SELECT CAST(order_ts AS DATE) AS order_day, channel, sum(amount) AS revenue, count(*) AS n "
    "FROM {orders} WHERE status <> 'cancelled' {where} GROUP BY ALL"
)
RECOMPUTE_MONTHLY = (
    "SELECT CAST(date_trunc('month', order_day) AS DATE) AS order_month, channel, sum(revenue) AS revenue, "
    "sum(n) AS n, count(DISTINCT order_day) AS days FROM {daily} {where} GROUP BY ALL"
)

DAYS = 365
START = dt.date(2025, 1, 1)
# Late updates: 0.1% of all orders, all of them placed on 30 old days (day 5, 15, ..., 295 of the
# year: 10 of the 12 months; the last two months untouched). Every changed order gets a new amount
# and an updated_at after every existing row; a quarter of them flip to 'cancelled' (they leave
# the filter). STRIDE picks every 82nd order of those days: 30/365 of the rows / 82 = 0.1%.
CHANGED_DAYS, FIRST_DAY, DAY_STEP, UPDATE_SHARE = 30, 5, 10, 0.001
STRIDE = max(1, round(CHANGED_DAYS / DAYS / UPDATE_SHARE))
DAY_INDEX = f"datediff('day', DATE '{START.isoformat()}', CAST(o.order_ts AS DATE))"
LATE_UPDATE = f"""
UPDATE raw.orders AS o
SET amount = o.amount + 1.23,
    updated_at = m.max_updated + to_seconds(1 + o.order_id % 3600),
    status = CASE WHEN (o.order_id // {STRIDE}) % 4 = 0 THEN 'cancelled' ELSE o.status END
FROM (SELECT max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE o.order_id % {STRIDE} = 0
  AND {DAY_INDEX} % {DAY_STEP} = {FIRST_DAY}
  AND {DAY_INDEX} < {FIRST_DAY + DAY_STEP * CHANGED_DAYS}
"""
TARGET_VS_FLOOR = 2.0  # incremental / floor at most (issue #6, item 8)

FLOOR_IS = (
    "one connection on a copy holding plain tables `daily` and `monthly` with the previous results; in one "
    "transaction: DELETE the changed days from daily, INSERT their recomputation from raw.orders "
    "(WHERE status <> 'cancelled' AND (order_ts >= <day> AND order_ts < <next day> OR ... for each day), "
    "ranges DuckDB prunes row groups with), DELETE the "
    "affected months from monthly, INSERT them recomputed from daily; close. The floor is TOLD which days "
    "changed, for free: it pays no fingerprint scan of raw.orders (strata pays one per run, grouped by "
    "day: the source fingerprint and the per-partition fingerprints that find the days), no content "
    "hash, no pins, no history, no new immutable segment (it mutates the tables in place)."
)
# The least any tool must read to find the changed days of a cdc source without being told them:
# each day's row count (deletes, rows moved to another day) and the range of its change column
# (inserts and updates). Run before the floor's statements, it is the "floor + discovery" side.
DISCOVERY = (
    "SELECT CAST(order_ts AS DATE) AS order_day, count(*), min(updated_at), max(updated_at) "
    "FROM raw.orders GROUP BY 1"
)
DISCOVERY_IS = (
    "the floor's connection and statements, after one grouped scan of raw.orders giving each day's row count "
    "and updated_at range: what finding the changed days costs any tool that is not told them"
)
FULL_IS = (
    "run_project(full_refresh=True) on a copy of the same warehouse (strata state + changed source): "
    "both models rebuilt from all their input, with fingerprints, pins, content hash and history"
)


# -- set-up --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """What the late updates changed, as the floor is told it and as the bench checks it."""

    rows_updated: int
    rows_cancelled: int  # updated rows that are 'cancelled' now (a quarter flipped, a few already were)
    days: tuple[str, ...]  # days whose raw rows changed (what strata must find for `daily`)
    months: tuple[str, ...]  # months whose daily rows changed (what strata must find for `monthly`)
    daily_rows_changed: int


@dataclass(frozen=True)
class Files:
    """Templates built once; every repeat starts from fresh copies of them."""

    engine: Path  # strata's state after the first full build, then the change
    floor: Path  # plain previous results, then the change


def prepare(rows: int, work: Path, project: Path) -> tuple[Files, Change]:
    source, built, floor_built = work / "source.duckdb", work / "built.duckdb", work / "floor_built.duckdb"
    console.print(f"writing {rows:,} orders over {DAYS} days into {source} ...")
    write_narrow_source(source, rows, days=DAYS, start=START)
    copy(source, built)
    console.print("first full build through strata ...")
    first = run_project(project, built)
    assert paths_of(first) == dict.fromkeys(MODELS, "full"), f"first build took {paths_of(first)}"
    copy(source, floor_built)
    old_max = write_floor(floor_built, built, MODELS, "SELECT max(updated_at) FROM raw.orders")
    files = Files(work / "engine.tmpl.duckdb", work / "floor.tmpl.duckdb")
    for template, start in ((files.engine, built), (files.floor, floor_built)):
        copy(start, template)
        execute(template, [LATE_UPDATE])
    prints = {source_fingerprint(path) for path in (files.engine, files.floor)}
    assert len(prints) == 1, f"the changed sources differ: {prints}"
    return files, describe_change(files.engine, old_max)


def describe_change(engine: Path, old_max: dt.datetime) -> Change:
    """Which days and months the late updates changed, found from the data (not from the UPDATE)."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{engine}' AS e (READ_ONLY)")
        changed = "FROM e.raw.orders WHERE updated_at > ?"
        rows_updated, rows_cancelled = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE status = 'cancelled') {changed}", [old_max]
        ).fetchone()
        days = [
            str(row[0])
            for row in con.execute(
                f"SELECT DISTINCT CAST(order_ts AS DATE) {changed} ORDER BY 1", [old_max]
            ).fetchall()
        ]
        # Daily rows whose content differs between the previous results and a recomputation.
        con.execute(
            "CREATE TEMP TABLE recomputed AS " + RECOMPUTE_DAILY.format(orders="e.raw.orders", where="")
        )
        cols = ", ".join(COLUMNS[DAILY])
        differ = con.execute(
            f"SELECT DISTINCT order_day FROM ((SELECT {cols} FROM recomputed EXCEPT ALL "
            f"SELECT {cols} FROM {view(DAILY, 'e')}) UNION ALL (SELECT {cols} FROM {view(DAILY, 'e')} "
            f"EXCEPT ALL SELECT {cols} FROM recomputed)) ORDER BY 1"
        ).fetchall()
        daily_rows = con.execute(
            f"SELECT count(*) FROM (SELECT {cols} FROM recomputed EXCEPT ALL SELECT {cols} FROM {view(DAILY, 'e')})"
        ).fetchone()[0]
    finally:
        con.close()
    changed_days = {str(row[0]) for row in differ}
    assert changed_days and changed_days <= set(days), "the late updates changed no daily row, or others"
    months = sorted({day[:7] + "-01" for day in changed_days})
    return Change(int(rows_updated), int(rows_cancelled), tuple(days), tuple(months), int(daily_rows))


def floor_statements(change: Change) -> list[str]:
    days = ", ".join(f"DATE '{day}'" for day in change.days)
    months = ", ".join(f"DATE '{month}'" for month in change.months)
    # Each day as a range of order_ts, which DuckDB prunes row groups with (the rows are stored in
    # order_ts order); `CAST(order_ts AS DATE) IN (...)` would read every row group.
    day_ranges = " OR ".join(
        f"(order_ts >= TIMESTAMP '{day}' AND order_ts < TIMESTAMP '{dt.date.fromisoformat(day) + dt.timedelta(days=1)}')"
        for day in change.days
    )
    return [
        "BEGIN TRANSACTION",
        f"DELETE FROM daily WHERE order_day IN ({days})",
        "INSERT INTO daily BY NAME "
        + RECOMPUTE_DAILY.format(orders="raw.orders", where=f"AND ({day_ranges})"),
        f"DELETE FROM monthly WHERE order_month IN ({months})",
        "INSERT INTO monthly BY NAME "
        + RECOMPUTE_MONTHLY.format(
            daily="daily", where=f"WHERE CAST(date_trunc('month', order_day) AS DATE) IN ({months})"
        ),
        "COMMIT",
    ]


# -- checks --------------------------------------------------------------------------------------


def check_incremental(result, change: Change) -> dict[str, dict[str, Any]]:
    """Both models took the partitions path, on exactly the changed days and months."""
    paths = paths_of(result)
    assert paths == dict.fromkeys(MODELS, "partitions"), f"incremental run took {paths}"
    details = {outcome.model: outcome.detail for outcome in result.outcomes}
    found = {model: tuple(details[model].get("partitions") or ()) for model in MODELS}
    expected = {DAILY: change.days, MONTHLY: change.months}
    assert found == expected, f"affected partitions {found}, expected {expected}"
    return details


def check_full(result) -> None:
    paths = paths_of(result)
    assert paths == dict.fromkeys(MODELS, "full"), f"full refresh took {paths}"
    reasons = {outcome.model: outcome.detail.get("full_reason") for outcome in result.outcomes}
    assert set(reasons.values()) == {"full refresh requested"}, f"full refresh reasons {reasons}"


def multiset_mismatch(
    con: duckdb.DuckDBPyConnection, columns: tuple[str, ...], left: str, right: str
) -> tuple[int, int, int]:
    """(rows left, rows right, row hashes whose multiplicity differs): (n, n, 0) when equal."""
    row_hash = f"hash({', '.join(columns)})"
    row = con.execute(
        f"""
        WITH a AS (SELECT {row_hash} AS h, count(*) AS n FROM {left} GROUP BY 1),
             b AS (SELECT {row_hash} AS h, count(*) AS n FROM {right} GROUP BY 1)
        SELECT (SELECT sum(n) FROM a), (SELECT sum(n) FROM b),
               (SELECT count(*) FROM a FULL OUTER JOIN b USING (h) WHERE a.n IS DISTINCT FROM b.n)
        """
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0), int(row[2])


def verify(engine: Path, full: Path, floor: Path) -> None:
    """Incremental day and month models = a full recomputation from the changed raw.orders (and so
    do the full rebuild's and the floor's)."""
    con = duckdb.connect()
    try:
        for alias, path in (("inc", engine), ("fullw", full), ("floorw", floor)):
            con.execute(f"ATTACH '{path}' AS {alias} (READ_ONLY)")
        con.execute(
            "CREATE TEMP TABLE expected_daily AS " + RECOMPUTE_DAILY.format(orders="inc.raw.orders", where="")
        )
        con.execute(
            "CREATE TEMP TABLE expected_monthly AS "
            + RECOMPUTE_MONTHLY.format(daily="expected_daily", where="")
        )
        for model in MODELS:
            for label, relation in (
                ("incremental", view(model, "inc")),
                ("full rebuild", view(model, "fullw")),
                ("floor", f"floorw.main.{model}"),
            ):
                left, right, mismatched = multiset_mismatch(
                    con, COLUMNS[model], relation, f"expected_{model}"
                )
                assert mismatched == 0 and left == right, (
                    f"{model}, {label} vs full recomputation: {left} vs {right} rows, "
                    f"{mismatched} row hash(es) with other multiplicities"
                )
    finally:
        con.close()


# -- timed runs ----------------------------------------------------------------------------------


@dataclass
class Sides:
    incremental: Timings = field(default_factory=lambda: Timings([], []))
    full: Timings = field(default_factory=lambda: Timings([], []))
    floor: Timings = field(default_factory=lambda: Timings([], []))
    discovering_floor: Timings = field(default_factory=lambda: Timings([], []))
    details: dict[str, dict[str, Any]] = field(default_factory=dict)  # incremental outcome details


def bench(rows: int, repeat: int, work: Path, versioning: str) -> tuple[Sides, Change, Files, Path]:
    project = work / "project"
    project.mkdir()
    (project / "bench.strata").write_text(with_versioning(PROJECT, versioning))
    load_project(project)  # one-time costs of the process (imports, grammar) outside the clock
    files, change = prepare(rows, work, project)
    floor_sql = floor_statements(change)
    engine, full, floor = work / "engine.duckdb", work / "full.duckdb", work / "floor.duckdb"
    discovering = work / "discovering_floor.duckdb"
    sides = Sides()

    def incremental() -> None:
        sides.details = check_incremental(run_project(project, engine, only_stale=True), change)

    calls: list[tuple[Callable[[], object], Timings]] = [
        (incremental, sides.incremental),
        (lambda: check_full(run_project(project, full, full_refresh=True)), sides.full),
        (lambda: execute(floor, floor_sql), sides.floor),
        (lambda: execute(discovering, [DISCOVERY, *floor_sql]), sides.discovering_floor),
    ]
    console.print(
        f"late updates: {change.rows_updated:,} orders on {len(change.days)} days; "
        f"{repeat} interleaved repeats ..."
    )
    for i in range(repeat):
        copy(files.engine, engine)
        copy(files.engine, full)
        copy(files.floor, floor)
        copy(files.floor, discovering)
        shift = i % len(calls)
        for call, into in calls[shift:] + calls[:shift]:
            timed(call, into)
        verify(engine, full, floor)
    return sides, change, files, project


# -- profile -------------------------------------------------------------------------------------
# Wraps Session and history methods, the run's connection, its source read and the statement runner
# of the warehouse modules, in this process only (nothing under strata_dagster/ is changed), and
# charges wall time to the outermost step, per model.

RUN = "(run)"
SOURCE_READ = "source read: raw.orders grouped by day (fingerprint + partitions)"
STEPS_ORDER = (
    "connect + migrations check",
    "load project, compile, describe sources",
    SOURCE_READ,
    "per-partition fingerprint scan of the `from` input",
    "keys table (affected partitions)",
    "recompute affected partitions (CTAS segment)",
    "removed rows: scan of the previous state",
    "content hash of the new segment",
    "pins (unique)",
    "history reads",
    "catalog lookups (tables, views)",
    "repoint views",
    "history writes",
    "COMMIT",
    "serving copy refresh",
    "close (checkpoint)",
)


@dataclass
class Breakdown:
    total: float = 0.0
    steps: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    decide: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # per model, all of it
    statements: list[tuple[str, str, str, float]] = field(default_factory=list)  # model, step, sql, s

    def other(self, model: str) -> float:
        """Time of a model (or of the run outside the models) charged to no step: Python."""
        spent = sum(seconds for (owner, _), seconds in self.steps.items() if owner == model)
        if model == RUN:
            return self.total - sum(self.decide.values()) - spent
        return self.decide.get(model, 0.0) - spent


class Clock:
    def __init__(self) -> None:
        self.current: Breakdown | None = None
        self.stack: list[str] = []
        self.model = RUN

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        is_outermost = not self.stack
        self.stack.append(label)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stack.pop()
            if is_outermost:
                self.charge(label, time.perf_counter() - started)

    def charge(self, label: str, seconds: float) -> None:
        if self.current is not None:
            self.current.steps[(self.model, label)] += seconds


CLOCK = Clock()


def _content_label(_session: Session, relation: exp.Table | exp.Query, *_: Any, **__: Any) -> str:
    if isinstance(relation, exp.Table) and relation.db == SNAPSHOT_SCHEMA:
        return "content hash of the new segment"
    return "content scan of an input"  # a source read outside RunScope.read_sources, or replay


SESSION_STEPS: dict[str, str | Callable[..., str]] = {
    "content": _content_label,
    # In a model's decision (outside the run's source read): monthly's grouped scan of daily.
    "content_by_group": "per-partition fingerprint scan of the `from` input",
    "create_values_table": "keys table (affected partitions)",
    "create_snapshot": "recompute affected partitions (CTAS segment)",
    "content_where": "removed rows: scan of the previous state",
    "unique_violation": "pins (unique)",
    "contract_violation": "pins (unique)",
    "catalog": "catalog lookups (tables, views)",  # one read per run, where the engine has it
    "snapshot_exists": "catalog lookups (tables, views)",
    "view_tables": "catalog lookups (tables, views)",
    "point_view_at": "repoint views",
    "point_view": "repoint views",
    "drop_snapshot": "drop tables",
    "commit": "COMMIT",
    "begin": "BEGIN / ROLLBACK",
    "rollback": "BEGIN / ROLLBACK",
}


def _wrap(owner: Any, name: str, label: str | Callable[..., str]) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return  # this version of the engine lacks it

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with CLOCK.step(label(*args, **kwargs) if callable(label) else label):
            return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def install_clock() -> None:
    for name, label in SESSION_STEPS.items():
        _wrap(DuckDBSession, name, label)
    for name, value in list(vars(HistoryWriter).items()):
        if callable(value) and not name.startswith("_"):
            _wrap(HistoryWriter, name, "history writes")
    for name, value in list(vars(HistoryReader).items()):
        if callable(value) and not name.startswith("_"):
            _wrap(HistoryReader, name, "history reads")
    _wrap(engine_run, "load_context", "load project, compile, describe sources")
    # The run's source read: for a source that a partitioned model reads as its `from`, ONE grouped
    # scan (Session.content_by_group) gives the source fingerprint and that model's per-partition
    # fingerprints; other sources get a whole-table Session.content. Outermost, so both land here.
    _wrap(RunScope, "read_sources", SOURCE_READ)

    # The session's exit refreshes the serving copy, then closes the connection (DuckDB's
    # checkpoint): the refresh is timed on its own, the rest is the close.
    refreshed: list[float] = []
    original_refresh = duckdb_opening_module.refresh_serving

    def refresh_timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_refresh(*args, **kwargs)
        finally:
            refreshed.append(time.perf_counter() - started)

    duckdb_opening_module.refresh_serving = refresh_timed
    original_session = engine_run.open_session

    @contextmanager
    def open_session_timed(path: Path, **kwargs: Any) -> Iterator[Session]:
        manager = original_session(path, **kwargs)
        with CLOCK.step("connect + migrations check"):
            session = manager.__enter__()
        try:
            yield session
        except BaseException:
            if not manager.__exit__(*sys.exc_info()):
                raise
        else:
            refreshed.clear()
            started = time.perf_counter()
            manager.__exit__(None, None, None)
            CLOCK.charge("serving copy refresh", sum(refreshed))
            CLOCK.charge("close (checkpoint)", time.perf_counter() - started - sum(refreshed))

    engine_run.open_session = open_session_timed

    original_decide = engine_run._Run._decide

    def decide(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        CLOCK.model = name
        started = time.perf_counter()
        try:
            return original_decide(self, name, *args, **kwargs)
        finally:
            if CLOCK.current is not None:
                CLOCK.current.decide[name] += time.perf_counter() - started
            CLOCK.model = RUN

    engine_run._Run._decide = decide

    def statement_runner(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(
            con: duckdb.DuckDBPyConnection, statement: exp.Expression, params: Any = None, **options: Any
        ) -> Any:
            text = render(statement)  # before the call: a consumed statement may be rewritten by it
            started = time.perf_counter()
            result = original(con, statement, params, **options)
            if CLOCK.current is not None:
                step = CLOCK.stack[0] if CLOCK.stack else "(no step)"
                CLOCK.current.statements.append((CLOCK.model, step, text, time.perf_counter() - started))
            return result

        return run

    for module in (figures_module, key_figures_module, shared_tables_module, snapshot_files_module):
        module.run = statement_runner(module.run)  # type: ignore[attr-defined]  # the module's imported run


def profiled(call: Callable[[], object]) -> Breakdown:
    breakdown = Breakdown()
    CLOCK.current = breakdown
    started = time.perf_counter()
    try:
        call()
    finally:
        breakdown.total = time.perf_counter() - started
        CLOCK.current = None
    return breakdown


def profile(
    files: Files, project: Path, work: Path, change: Change, runs: int, html: Path | None
) -> tuple[list[Breakdown], str]:
    """One incremental run under pyinstrument (engine untouched), then `runs` instrumented runs
    (time per step), each on a fresh copy of the changed warehouse."""
    engine = work / "engine.duckdb"
    tree = ""
    try:
        from pyinstrument import Profiler
    except ImportError:
        tree = "(pyinstrument is not installed: .venv/bin/pip install pyinstrument)"
    else:
        copy(files.engine, engine)
        profiler = Profiler(interval=0.001)
        profiler.start()
        check_incremental(run_project(project, engine, only_stale=True), change)
        profiler.stop()
        tree = profiler.output_text(unicode=True, color=False, show_all=False)
        if html is not None:
            html.write_text(profiler.output_html())
    install_clock()  # only now: the timed runs and pyinstrument's ran the engine untouched
    breakdowns = []
    for _ in range(runs):
        copy(files.engine, engine)
        breakdowns.append(
            profiled(lambda: check_incremental(run_project(project, engine, only_stale=True), change))
        )
    return breakdowns, tree


# -- report --------------------------------------------------------------------------------------


def report(rows: int, repeat: int, sides: Sides, change: Change, verbose: bool, versioning: str) -> None:
    inc, full, floor = sides.incremental, sides.full, sides.floor
    table = Table(
        title=f"partition-complete incremental vs DuckDB floor and full rebuild, {rows:,} orders over {DAYS} days, "
        f"{repeat} interleaved repeats, versioning {versioning}"
    )
    table.add_column("side")
    for column in ("wall s\nbest / median", "cpu s\nbest", "vs floor\nbest / median", "cpu vs floor\nbest"):
        table.add_column(column, justify="right")
    table.add_column("target")
    table.add_column("verdict\n(best)")
    best = min(inc.wall) / min(floor.wall)
    sides_shown: list[tuple[str, Timings, str, str]] = [
        (
            "incremental (only_stale)",
            inc,
            f"<= {TARGET_VS_FLOOR}x floor",
            "[green]PASS[/green]" if best <= TARGET_VS_FLOOR else "[red]MISS[/red]",
        ),
        ("full rebuild (full_refresh)", full, "", "[dim]info[/dim]"),
        ("floor (SQL, told the days)", floor, "", ""),
        ("floor + discovery (finds the days)", sides.discovering_floor, "", "[dim]info[/dim]"),
    ]
    for label, timings, target, verdict in sides_shown:
        table.add_row(
            label,
            format_best_median(timings.wall),
            f"{min(timings.cpu):.3f}",
            f"{min(timings.wall) / min(floor.wall):.2f} / {statistics.median(timings.wall) / statistics.median(floor.wall):.2f}",
            f"{min(timings.cpu) / min(floor.cpu):.2f}",
            target,
            verdict,
        )
    console.print(table)
    console.print(
        f"  full rebuild / incremental: {min(full.wall) / min(inc.wall):.2f} (best), "
        f"{statistics.median(full.wall) / statistics.median(inc.wall):.2f} (median), cpu {min(full.cpu) / min(inc.cpu):.2f} "
        "(above 1: the incremental run is faster than a full rebuild)"
    )
    daily, monthly = sides.details[DAILY], sides.details[MONTHLY]
    console.print(
        f"  change: {change.rows_updated:,} orders updated ({change.rows_updated / rows:.2%}), "
        f"{change.rows_cancelled:,} of them now cancelled, on {len(change.days)} days "
        f"({change.days[0]} .. {change.days[-1]}) in {len(change.months)} months; "
        f"{change.daily_rows_changed:,} daily rows changed"
    )
    console.print(
        f"  strata found: daily {len(daily['partitions'])} of {daily['partitions_total']} day partitions "
        f"(segment {daily.get('segment_rows')} rows, replaced {daily.get('rows_replaced')}); monthly "
        f"{len(monthly['partitions'])} of {monthly['partitions_total']} month partitions "
        f"(segment {monthly.get('segment_rows')} rows) - asserted equal to the changed days and months"
    )
    if verbose:
        for side in ("incremental", "full", "floor", "discovering_floor"):
            timings: Timings = getattr(sides, side)
            console.print(
                f"    {side:<11} wall {format_seconds(timings.wall)}; cpu {format_seconds(timings.cpu)}"
            )
    console.print(
        "  verified after every repeat (row-hash multisets): incremental daily and monthly = full recomputation "
        "from raw.orders (so do the full rebuild and the floor)"
    )
    console.print(f"  floor: {FLOOR_IS}")
    console.print(f"  floor + discovery: {DISCOVERY_IS}")
    console.print(f"  full rebuild: {FULL_IS}")
    console.print(
        "  source: raw.orders of write_sample_data without its `tags` list column (7 columns), no raw.customers"
    )
    console.print(f"  machine: {machine()}")
    console.print(
        f"  load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"on {len(os.sched_getaffinity(0))} CPUs: above the CPU count, other processes shared the machine"
    )
    console.print(f"  engine: strata_dagster imported from {Path(strata_dagster.__file__).parent}")


def report_profile(breakdowns: list[Breakdown], tree: str, statements: int) -> None:
    keys = {key for b in breakdowns for key in b.steps}
    labels = [label for label in STEPS_ORDER if any(key[1] == label for key in keys)]
    labels += sorted({key[1] for key in keys} - set(labels))
    median = statistics.median
    total = median([b.total for b in breakdowns])
    table = Table(
        title=f"where the incremental run's time goes (median of {len(breakdowns)} instrumented runs, seconds)"
    )
    table.add_column("step")
    for column in (RUN, DAILY, MONTHLY, "total", "share"):
        table.add_column(column, justify="right")

    def cell(model: str, label: str) -> float:
        return median([b.steps.get((model, label), 0.0) for b in breakdowns])

    rows = []
    for label in labels:
        values = [cell(model, label) for model in (RUN, DAILY, MONTHLY)]
        rows.append((label, values))
    others = [median([b.other(model) for b in breakdowns]) for model in (RUN, DAILY, MONTHLY)]
    rows.append(("other (python: planning, sqlglot, fingerprints of models)", others))
    for label, values in rows:
        amount = sum(values)
        table.add_row(
            label,
            *(f"{v:.3f}" if v >= 0.0005 else "" for v in values),
            f"{amount:.3f}",
            f"{amount / total:.0%}",
        )
    table.add_row(
        "[bold]total run_project[/bold]", "", "", "", f"[bold]{total:.3f}[/bold]", "100%", end_section=True
    )
    console.print(table)
    last = breakdowns[-1]
    console.print("  slowest statements (last instrumented run):")
    for model, step, sql, seconds in sorted(last.statements, key=lambda item: -item[3])[:statements]:
        line = f"    {seconds:7.3f}  [{model}: {step}] {' '.join(sql.split())}"
        console.print(line[: console.width * 2], highlight=False, markup=False, soft_wrap=True)
    if tree:
        console.print("pyinstrument, one incremental run:", highlight=False)
        console.print(tree, highlight=False, markup=False, soft_wrap=True)


# -- scenario "dimension change" -----------------------------------------------------------------
DIMENSION = "dimension change"
JOINED_PROJECT = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

source customers {
  table: raw.customers
}

model region_daily {
  from orders
  let order_day = cast(order_ts as date)
  join left customers using (customer_id)
  filter status <> 'cancelled'
  group order_day, coalesce(region, 'unknown') as region
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
  unique: [order_day, region]
}
"""
REGION_DAILY = "region_daily"
REGION_COLUMNS = ("order_day", "region", "revenue", "n")
RECOMPUTE_REGION_DAILY = (
    "SELECT CAST(o.order_ts AS DATE) AS order_day, coalesce(c.region, 'unknown') AS region, "
    "sum(o.amount) AS revenue, count(*) AS n FROM {orders} AS o LEFT JOIN {customers} AS c USING (customer_id) "
    "WHERE o.status <> 'cancelled' {where} GROUP BY ALL"
)
CHANGED_CUSTOMERS = (3, 4)  # about 50 orders each, on as many days
DIMENSION_CHANGE = (
    f"UPDATE raw.customers SET region = 'moved' WHERE list_contains({list(CHANGED_CUSTOMERS)}, customer_id)",
)
DIMENSION_FLOOR_IS = (
    "one connection on a copy holding a plain table `region_daily` with the previous results, TOLD the changed "
    "customer ids: SELECT DISTINCT the days of their orders, then in one transaction DELETE those days and INSERT "
    "their recomputation (orders LEFT JOIN customers, the days as order_ts ranges DuckDB prunes row groups with); "
    "close. No fingerprints, no per-key figures, no content hash, pins, history or immutable segment"
)


def dimension_floor(path: Path) -> None:
    con = duckdb.connect(str(path))
    try:
        days = [
            row[0]
            for row in con.execute(
                "SELECT DISTINCT CAST(order_ts AS DATE) FROM raw.orders WHERE list_contains(?, customer_id) ORDER BY 1",
                [list(CHANGED_CUSTOMERS)],
            ).fetchall()
        ]
        listed = ", ".join(f"DATE '{day}'" for day in days)
        ranges = " OR ".join(
            f"(o.order_ts >= TIMESTAMP '{day}' AND o.order_ts < TIMESTAMP '{day + dt.timedelta(days=1)}')"
            for day in days
        )
        con.execute("BEGIN TRANSACTION")
        con.execute(f"DELETE FROM region_daily WHERE order_day IN ({listed})")
        con.execute(
            "INSERT INTO region_daily BY NAME "
            + RECOMPUTE_REGION_DAILY.format(
                orders="raw.orders", customers="raw.customers", where=f"AND ({ranges})"
            )
        )
        con.execute("COMMIT")
    finally:
        con.close()


def prepare_dimension(rows: int, work: Path, project: Path) -> tuple[Files, tuple[str, ...]]:
    source, built, floor_built = work / "source.duckdb", work / "built.duckdb", work / "floor_built.duckdb"
    console.print(f"writing {rows:,} orders over {DAYS} days (and their customers) into {source} ...")
    write_sample_data(source, rows, days=DAYS, start=START)
    execute(source, [statement for statement in NARROW if "customers" not in statement])
    with open_session(source):
        pass
    copy(source, built)
    console.print("first full build through strata ...")
    first = run_project(project, built)
    assert paths_of(first) == {REGION_DAILY: "full"}, f"first build took {paths_of(first)}"
    copy(source, floor_built)
    write_floor(floor_built, built, (REGION_DAILY,), "SELECT 1")
    files = Files(work / "engine.tmpl.duckdb", work / "floor.tmpl.duckdb")
    for template, start in ((files.engine, built), (files.floor, floor_built)):
        copy(start, template)
        execute(template, DIMENSION_CHANGE)
    con = duckdb.connect(str(files.engine), read_only=True)
    try:
        days = con.execute(
            "SELECT DISTINCT CAST(CAST(order_ts AS DATE) AS VARCHAR) FROM raw.orders "
            "WHERE list_contains(?, customer_id) ORDER BY 1",
            [list(CHANGED_CUSTOMERS)],
        ).fetchall()
    finally:
        con.close()
    return files, tuple(row[0] for row in days)


def verify_dimension(engine: Path, full: Path, floor: Path) -> None:
    con = duckdb.connect()
    try:
        for alias, path in (("inc", engine), ("fullw", full), ("floorw", floor)):
            con.execute(f"ATTACH '{path}' AS {alias} (READ_ONLY)")
        con.execute(
            "CREATE TEMP TABLE expected AS "
            + RECOMPUTE_REGION_DAILY.format(orders="inc.raw.orders", customers="inc.raw.customers", where="")
        )
        for label, relation in (
            ("incremental", view(REGION_DAILY, "inc")),
            ("full rebuild", view(REGION_DAILY, "fullw")),
            ("floor", f"floorw.main.{REGION_DAILY}"),
        ):
            left, right, mismatched = multiset_mismatch(con, REGION_COLUMNS, relation, "expected")
            assert mismatched == 0 and left == right, (
                f"{label}: {left} vs {right} rows, {mismatched} hash(es) differ"
            )
    finally:
        con.close()


def bench_dimension(rows: int, repeat: int, work: Path) -> tuple[Sides, tuple[str, ...]]:
    project = work / "project"
    project.mkdir()
    (project / "bench.strata").write_text(JOINED_PROJECT)
    load_project(project)
    files, days = prepare_dimension(rows, work, project)
    engine, full, floor = work / "engine.duckdb", work / "full.duckdb", work / "floor.duckdb"
    sides = Sides()

    def incremental() -> None:
        result = run_project(project, engine, only_stale=True)
        outcome = result.outcome(REGION_DAILY)
        assert outcome.path == "partitions", f"incremental run took {outcome.path}: {outcome.detail}"
        assert tuple(outcome.detail["partitions"]) == days, "strata recomputed other days than the customers'"
        sides.details = {REGION_DAILY: outcome.detail}

    def full_rebuild() -> None:
        assert paths_of(run_project(project, full, full_refresh=True)) == {REGION_DAILY: "full"}

    calls: list[tuple[Callable[[], object], Timings]] = [
        (incremental, sides.incremental),
        (full_rebuild, sides.full),
        (lambda: dimension_floor(floor), sides.floor),
    ]
    console.print(
        f"dimension change: customers {list(CHANGED_CUSTOMERS)} moved region; their orders are on {len(days)} "
        f"of {DAYS} days; {repeat} interleaved repeats ..."
    )
    for i in range(repeat):
        copy(files.engine, engine)
        copy(files.engine, full)
        copy(files.floor, floor)
        shift = i % len(calls)
        for call, into in calls[shift:] + calls[:shift]:
            timed(call, into)
        verify_dimension(engine, full, floor)
    return sides, days


def report_dimension(rows: int, repeat: int, sides: Sides, days: tuple[str, ...]) -> None:
    floor = sides.floor
    table = Table(
        title=f"dimension change: partitions reached by changed join keys vs DuckDB floor and full rebuild, "
        f"{rows:,} orders over {DAYS} days, {repeat} interleaved repeats"
    )
    table.add_column("side")
    for column in ("wall s\nbest / median", "cpu s\nbest", "vs floor\nbest / median", "cpu vs floor\nbest"):
        table.add_column(column, justify="right")
    for label, timings in (
        ("incremental (only_stale)", sides.incremental),
        ("full rebuild (full_refresh)", sides.full),
        ("floor (SQL, told the customers)", floor),
    ):
        table.add_row(
            label,
            format_best_median(timings.wall),
            f"{min(timings.cpu):.3f}",
            f"{min(timings.wall) / min(floor.wall):.2f} / "
            f"{statistics.median(timings.wall) / statistics.median(floor.wall):.2f}",
            f"{min(timings.cpu) / min(floor.cpu):.2f}",
        )
    console.print(table)
    detail = sides.details[REGION_DAILY]
    console.print(
        f"  strata recomputed {len(detail['partitions'])} of {detail['partitions_total']} days "
        f"({detail.get('partitions_reached_by_joins')} reached by changed customers; asserted equal to the days of "
        f"their orders), segment {detail.get('segment_rows')} rows, "
        f"{detail.get('partitions_unchanged', 0)} recomputed days unchanged"
    )
    console.print(
        "  verified after every repeat (row-hash multisets): all three sides = a full recomputation"
    )
    console.print(f"  floor: {DIMENSION_FLOOR_IS}")
    console.print(f"  machine: {machine()}")
    console.print(
        f"  load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"on {len(os.sched_getaffinity(0))} CPUs"
    )
    console.print(f"  engine: strata_dagster imported from {Path(strata_dagster.__file__).parent}")


def main() -> None:
    parser = bench_arguments(__doc__, "interleaved repeats (default 5)")
    add_versioning_argument(parser)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then: instrumented incremental runs (time per step), one pyinstrument run",
    )
    parser.add_argument(
        "--profile-runs", type=int, default=3, help="instrumented runs for the step table (default 3)"
    )
    parser.add_argument("--profile-html", type=Path, default=None, help="also write pyinstrument's HTML here")
    parser.add_argument("--statements", type=int, default=8, help="slowest statements listed (default 8)")
    parser.add_argument(
        "--scenario",
        choices=("late updates", DIMENSION),
        default="late updates",
        help="late updates to 30 old days (default), or a few customers joined to the day model changing region",
    )
    args = parser.parse_args()
    if args.scenario == DIMENSION:
        with tempfile.TemporaryDirectory(prefix="strata-bench-dim-", dir=args.dir) as work:
            sides, days = bench_dimension(args.rows, args.repeat, Path(work))
        report_dimension(args.rows, args.repeat, sides, days)
        return
    with tempfile.TemporaryDirectory(prefix="strata-bench-part-", dir=args.dir) as work:
        sides, change, files, project = bench(args.rows, args.repeat, Path(work), args.versioning)
        profiled_runs: tuple[list[Breakdown], str] | None = None
        if args.profile:
            console.print("profile ...")
            profiled_runs = profile(files, project, Path(work), change, args.profile_runs, args.profile_html)
    report(args.rows, args.repeat, sides, change, args.verbose, args.versioning)
    if profiled_runs is not None:
        report_profile(*profiled_runs, args.statements)


if __name__ == "__main__":
    main()
