"""Incremental benchmark: delta builds of an upsert and an append model against the DuckDB floor
of the same delta work, and against a full rebuild through strata.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_incremental.py [--rows 10000000] [--repeat 5] [--profile]

Scenarios: a 1% append, a 0.1% update, and a second 0.1% update on the state the first left. The
sides (incremental run, full rebuild, floor, bare fingerprint scan) run in this process, on the
same data, interleaved (the side that goes first rotates), and each timing is the wall time around
one call, connection open and close included. After every repeat the incremental result is checked
against the full rebuild and the floor (row-hash multisets), so a wrong delta fails the bench
instead of producing a number. See bench/README.md.
"""

from __future__ import annotations

import os
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
    SOURCE_SCANS,
    Timings,
    add_versioning_argument,
    bench_arguments,
    console,
    copy,
    cpu_seconds,
    execute,
    format_seconds,
    machine,
    paths_of,
    ratio_cells,
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
import strata_dagster.backends.duckdb.opening as opening_module
import strata_dagster.backends.duckdb.serving as serving_module
import strata_dagster.backends.duckdb.session as session_module
import strata_dagster.backends.duckdb.snapshot_files as snapshot_files_module
import strata_dagster.backends.sql.figures as figures_module
import strata_dagster.backends.sql.key_figures as key_figures_module
import strata_dagster.backends.sql.tables as shared_tables_module
import strata_dagster.engine.run as engine_run
from strata_dagster.backends.duckdb.session import DuckDBSession
from strata_dagster.engine.run import run_project
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, render
from strata_dagster.state.history import HistoryReader, HistoryWriter

PROJECT = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model orders_upsert {
  from orders
  let order_day = cast(order_ts as date)
  filter status <> 'cancelled'
  select order_id, customer_id, order_day, status, amount, updated_at
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
  unique: [order_id]
}

model orders_append {
  from orders
  select order_id, status, updated_at
  incremental
  merge_strategy: append
  cdc_column: updated_at
}
"""
UPSERT, APPEND_MODEL = "orders_upsert", "orders_append"
UNIQUE_PIN = "  unique: [order_id]\n"  # dropped with --no-unique
MODELS = (APPEND_MODEL, UPSERT)  # project order

# 1% new orders: new order_ids, placed a year later, updated after every existing row.
APPEND = """
INSERT INTO raw.orders
SELECT o.order_id + m.max_id, o.customer_id, o.order_ts + INTERVAL 1 YEAR,
       m.max_updated + to_seconds(o.order_id), o.status, o.amount, o.channel
FROM raw.orders AS o,
     (SELECT max(order_id) AS max_id, max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE o.order_id <= ?
"""
# 0.1% of the orders (every 1000th id, spread over the whole table, from the id given) re-stamped
# after every existing row with a new amount and status: a quarter become 'cancelled' (they leave
# the upsert model's filter), cancelled ones become 'paid' (they enter it), the rest 'returned'.
UPDATE = """
UPDATE raw.orders AS o
SET updated_at = m.max_updated + to_seconds(o.order_id // 1000 + 1),
    amount = o.amount + 1,
    status = CASE WHEN (o.order_id // 1000) % 4 = 0 THEN 'cancelled'
                  WHEN o.status = 'cancelled' THEN 'paid'
                  ELSE 'returned' END
FROM (SELECT max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE o.order_id % 1000 = ?
"""
# The floor: a hand-made incremental over plain tables holding the previous results, given the
# watermark (max(updated_at) of the previous build) as a literal. The classic MERGE for the
# upsert (delete the changed keys, taken before the filter, then insert the changed rows that
# pass it) and an INSERT of the window for the append. No fingerprint scan, no deleted-key
# detection, no content hash, no unique check, no history: the least work for the same rows.
FLOOR = (
    "BEGIN TRANSACTION",
    "DELETE FROM orders_upsert WHERE order_id IN "
    "(SELECT order_id FROM raw.orders WHERE updated_at > CAST($wm AS TIMESTAMP))",
    "INSERT INTO orders_upsert BY NAME "
    "SELECT order_id, customer_id, CAST(order_ts AS DATE) AS order_day, status, amount, updated_at "
    "FROM raw.orders WHERE updated_at > CAST($wm AS TIMESTAMP) AND status <> 'cancelled'",
    "INSERT INTO orders_append BY NAME "
    "SELECT order_id, status, updated_at FROM raw.orders WHERE updated_at > CAST($wm AS TIMESTAMP)",
    "COMMIT",
)
FLOOR_IS = (
    "one connection on a copy holding plain tables of the previous results; in one transaction: "
    "DELETE FROM orders_upsert WHERE order_id IN (keys of raw.orders with updated_at > watermark); "
    "INSERT of those rows that pass the filter; INSERT INTO orders_append of the same window; close. "
    "The watermark is a literal. No fingerprint scan, no deleted-key check, no content hash, no pins, no history."
)
FULL_IS = (
    "run_project on a copy of the changed source with no strata state (first build: both models full), "
    "fingerprint, pins, content hash and history included"
)
TARGET_VS_FLOOR = 2.0  # incremental / floor at most
TARGET_VS_FULL = 5.0  # full / incremental at least
TARGET_VS_UNSERVED = 1.10  # incremental / the same run without the serving refresh (issue 19), at most


@dataclass(frozen=True)
class Sides:
    incremental: Timings
    full: Timings
    floor: Timings
    fingerprint: Timings  # the bare source fingerprint scan, own connection: what every run must pay today
    # --serving-baseline: the same incremental run on its own copy, with the serving refresh skipped
    unserved: Timings | None = None


@contextmanager
def serving_skipped() -> Iterator[None]:
    """Runs in this block publish to the warehouse only, not to readers: the baseline of what the
    serving refresh costs (the bench's own switch; the product always refreshes)."""
    original = serving_module.refresh
    serving_module.refresh = lambda *args, **kwargs: None  # type: ignore[assignment]  # the bench's switch
    try:
        yield
    finally:
        serving_module.refresh = original


@dataclass
class Scenario:
    name: str
    change: str
    params: list[Any]
    # The scenario whose incremental result this one starts from (None: the first full build).
    after: str | None = None
    sides: Sides | None = None
    details: dict[str, dict[str, Any]] = field(default_factory=dict)  # model -> outcome detail


@dataclass(frozen=True)
class Start:
    """The states a scenario's change is applied to."""

    source: Path  # the source alone, no strata state (the full rebuild starts here)
    built: Path  # strata's warehouse, up to date
    floor: Path  # the source with plain tables of the same results
    watermark: str  # max(updated_at) of the source those results were built from


@dataclass(frozen=True)
class Files:
    """The templates a scenario's repeats copy from (built once)."""

    engine: Path  # strata's up-to-date state, then the change
    full: Path  # the changed source, migrated, no strata state
    floor: Path  # plain previous results, then the change


def rotate(
    repeat: int,
    prepare: Callable[[], None],
    sides: list[tuple[Callable[[], object], Timings]],
    after: Callable[[], None],
) -> None:
    """Time each side `repeat` times on freshly prepared state; the side that goes first rotates."""
    for i in range(repeat):
        prepare()
        shift = i % len(sides)
        for call, into in sides[shift:] + sides[:shift]:
            timed(call, into)
        after()


def check_paths(result, expected: str) -> dict[str, str]:
    paths = paths_of(result)
    assert paths == dict.fromkeys(MODELS, expected), f"unexpected build paths {paths}, expected {expected}"
    return paths


def multiset_mismatch(con: duckdb.DuckDBPyConnection, left: str, right: str) -> tuple[int, int, int]:
    """(rows left, rows right, row hashes whose multiplicity differs): (n, n, 0) when equal."""
    row = con.execute(
        f"""
        WITH a AS (SELECT hash(r) AS h, count(*) AS n FROM {left} AS r GROUP BY 1),
             b AS (SELECT hash(r) AS h, count(*) AS n FROM {right} AS r GROUP BY 1)
        SELECT (SELECT sum(n) FROM a), (SELECT sum(n) FROM b),
               (SELECT count(*) FROM a FULL OUTER JOIN b USING (h) WHERE a.n IS DISTINCT FROM b.n)
        """
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0), int(row[2])


def verify(scenario: str, engine: Path, full: Path, floor: Path, *, full_built: bool = True) -> None:
    """The incremental upsert equals the full rebuild (and the floor's); the incremental append
    equals its definition, previous rows plus the window (the floor's table). Without
    `full_built` (no full rebuild in `full` yet) only the floor comparisons run."""
    con = duckdb.connect()
    try:
        for alias, path in (("inc", engine), ("fullw", full), ("floorw", floor)):
            con.execute(f"ATTACH '{path}' AS {alias} (READ_ONLY)")
        checks = [
            (f"{UPSERT}: incremental vs full rebuild", view(UPSERT, "inc"), view(UPSERT, "fullw")),
            (f"{UPSERT}: incremental vs floor", view(UPSERT, "inc"), f"floorw.main.{UPSERT}"),
            (
                f"{APPEND_MODEL}: incremental vs floor",
                view(APPEND_MODEL, "inc"),
                f"floorw.main.{APPEND_MODEL}",
            ),
        ]
        if not full_built:
            checks = checks[1:]
        for label, left, right in checks:
            rows_left, rows_right, mismatched = multiset_mismatch(con, left, right)
            assert mismatched == 0 and rows_left == rows_right, (
                f"{scenario}: {label} differ: {rows_left} vs {rows_right} rows, "
                f"{mismatched} row hash(es) with other multiplicities"
            )
    finally:
        con.close()


def prepare_templates(rows: int, work: Path, project: Path) -> tuple[Path, Path, Path, str]:
    """The changed-nothing states: the migrated source, strata's full build on it, the floor's copy."""
    source, built, floor = work / "source.duckdb", work / "built.duckdb", work / "floor_built.duckdb"
    console.print(f"writing {rows:,} orders into {source} ...")
    write_narrow_source(source, rows)
    copy(source, built)
    console.print("initial full build through strata ...")
    check_paths(run_project(project, built), "full")
    copy(source, floor)
    watermark = write_floor(floor, built, MODELS, "SELECT CAST(max(updated_at) AS VARCHAR) FROM raw.orders")
    return source, built, floor, watermark


def _slug(name: str) -> str:
    return name.replace("%", "pct").replace(" ", "_").replace(".", "_")


def scenario_files(scenario: Scenario, work: Path, source: Path, built: Path, floor: Path) -> Files:
    """Apply the same change to a copy of each state; check the three sources are identical."""
    slug = _slug(scenario.name)
    files = Files(
        work / f"{slug}_engine.tmpl.duckdb",
        work / f"{slug}_full.tmpl.duckdb",
        work / f"{slug}_floor.tmpl.duckdb",
    )
    for template, start in ((files.engine, built), (files.full, source), (files.floor, floor)):
        copy(start, template)
        con = duckdb.connect(str(template))
        try:
            con.execute(scenario.change, scenario.params)
        finally:
            con.close()
    prints = {source_fingerprint(path) for path in (files.engine, files.full, files.floor)}
    assert len(prints) == 1, f"{scenario.name}: the three changed sources differ: {prints}"
    return files


def bench(
    rows: int,
    repeat: int,
    work: Path,
    profile: bool,
    unique: bool,
    versioning: str,
    serving_baseline: bool = False,
) -> tuple[list[Scenario], list[Breakdown]]:
    project = work / "project"
    project.mkdir()
    text = with_versioning(PROJECT, versioning)
    (project / "bench.strata").write_text(text if unique else text.replace(UNIQUE_PIN, ""))
    source_scan = SOURCE_SCANS[versioning]
    starts: dict[str | None, Start] = {None: Start(*prepare_templates(rows, work, project))}
    engine, full, floor = work / "engine.duckdb", work / "full.duckdb", work / "floor.duckdb"
    unserved_engine = work / "engine_unserved.duckdb"
    scenarios = [
        Scenario("1% append", APPEND, [max(1, rows // 100)]),
        Scenario("0.1% update", UPDATE, [7]),
        # The same again on the state the first update left: a base and one delta segment.
        Scenario("2nd 0.1% update", UPDATE, [507], after="0.1% update"),
    ]
    templates: list[Files] = []
    for scenario in scenarios:
        start = starts[scenario.after]
        files = scenario_files(scenario, work, start.source, start.built, start.floor)
        templates.append(files)
        floor_sql = floor_statements(start.watermark)

        def prepare(files: Files = files) -> None:
            copy(files.engine, engine)
            if serving_baseline:
                copy(files.engine, unserved_engine)
            copy(files.full, full)
            copy(files.floor, floor)

        def incremental(scenario: Scenario = scenario, watermark: str = start.watermark) -> None:
            result = run_project(project, engine, only_stale=True)
            check_paths(result, "delta")
            scenario.details = {outcome.model: outcome.detail for outcome in result.outcomes}
            low = scenario.details[UPSERT]["window"]["low"]
            assert low == watermark, f"strata's watermark {low} is not the floor's {watermark}"

        def unserved() -> None:
            with serving_skipped():
                check_paths(run_project(project, unserved_engine, only_stale=True), "delta")

        sides = Sides(
            Timings([], []),
            Timings([], []),
            Timings([], []),
            Timings([], []),
            Timings([], []) if serving_baseline else None,
        )
        timed_sides = [
            (incremental, sides.incremental),
            (lambda: check_paths(run_project(project, full), "full"), sides.full),
            (lambda floor_sql=floor_sql: execute(floor, floor_sql), sides.floor),
            (lambda: execute(engine, [source_scan]), sides.fingerprint),
        ]
        if sides.unserved is not None:
            timed_sides.insert(1, (unserved, sides.unserved))
        console.print(f"{scenario.name} ...")
        rotate(
            repeat,
            prepare,
            timed_sides,
            lambda scenario=scenario: verify(scenario.name, engine, full, floor),
        )
        scenario.sides = sides
        if any(later.after == scenario.name for later in scenarios):
            starts[scenario.name] = advance(scenario, project, files, floor_sql, work)
    breakdowns: list[Breakdown] = []
    if profile:
        install_profiler()  # only now: the timed runs above ran the engine untouched
        for scenario, files in zip(scenarios, templates, strict=True):
            breakdowns.extend(profile_scenario(scenario.name, project, files, engine, full, source_scan))
    return scenarios, breakdowns


def floor_statements(watermark: str) -> list[str]:
    return [statement.replace("$wm", f"'{watermark}'") for statement in FLOOR]


def advance(scenario: Scenario, project: Path, files: Files, floor_sql: list[str], work: Path) -> Start:
    """The states after the scenario (untimed): strata's incremental result, the floor's, and the
    changed source alone for the full rebuild."""
    slug = _slug(scenario.name)
    built, floor = work / f"{slug}_after_engine.duckdb", work / f"{slug}_after_floor.duckdb"
    copy(files.engine, built)
    check_paths(run_project(project, built, only_stale=True), "delta")
    copy(files.floor, floor)
    execute(floor, floor_sql)
    verify(f"{scenario.name} (start of the next)", built, files.full, floor, full_built=False)
    con = duckdb.connect(str(floor), read_only=True)
    try:
        watermark = con.execute("SELECT CAST(max(updated_at) AS VARCHAR) FROM raw.orders").fetchone()[0]
    finally:
        con.close()
    return Start(files.full, built, floor, watermark)


# -- profile -------------------------------------------------------------------------------------
# Wraps Session / history methods and the statement runner of the warehouse modules (this process
# only; nothing under strata_dagster/ is changed) and attributes wall time to the outermost step.


@dataclass
class Breakdown:
    label: str
    total: float = 0.0
    total_cpu: float = 0.0
    steps: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # wall seconds
    cpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # process CPU seconds
    statements: list[tuple[str, str, float]] = field(default_factory=list)  # step, sql, wall seconds
    extra: float = 0.0  # probe work done for the profile only, not part of the run
    extra_cpu: float = 0.0

    def charge(self, step: str, wall: float, cpu: float) -> None:
        self.steps[step] += wall
        self.cpu[step] += cpu


class Profiler:
    def __init__(self) -> None:
        self.current: Breakdown | None = None
        self.stack: list[str] = []

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        is_outermost = not self.stack
        self.stack.append(label)
        cpu, started = cpu_seconds(), time.perf_counter()
        try:
            yield
        finally:
            self.stack.pop()
            if is_outermost and self.current is not None:
                self.current.charge(label, time.perf_counter() - started, cpu_seconds() - cpu)


PROFILER = Profiler()


def _content_label(relation: exp.Table | exp.Query) -> str:
    if isinstance(relation, exp.Table) and relation.db == SNAPSHOT_SCHEMA:
        return "content hash, new table"
    return "source fingerprint scan"


CDC = "updated_at"
WINDOW_STATS = "window_stats scans"
KEYS_TABLE = "keys table"


def _max_scans(breakdown: Breakdown) -> float | None:
    times = [
        seconds
        for step, sql, seconds in breakdown.statements
        if step == WINDOW_STATS and sql.upper().startswith(f"SELECT CAST(MAX({CDC.upper()})")
    ]
    return sum(times) if times else None


STEP_OF: dict[str, str | Callable[..., str]] = {
    "content": lambda self, relation, *a, **k: _content_label(relation),
    "window_stats": WINDOW_STATS,
    "create_keys_table": KEYS_TABLE,
    "create_snapshot": "CTAS (delta or full)",
    "content_where": "kept-rows check, removed rows",
    "content_and_key_sum_where": "kept-rows check, removed rows",
    "key_sum": "kept-rows check, removed rows",
    "unique_violation": "pins (unique, contract)",
    "unique_collisions": "pins (unique, contract)",
    "contract_violation": "pins (unique, contract)",
    "max_value": "max_value (computed cdc)",
    "drop_snapshot": "drop tables",
    "snapshot_exists": "catalog lookups",
    "view_tables": "catalog lookups",
    "schema_has_tables": "catalog lookups",
    "point_view_at_segments": "repoint views",
    "point_view_at": "repoint views",
    "point_view": "repoint views",
    "commit": "COMMIT",
    "begin": "BEGIN / ROLLBACK",
    "rollback": "BEGIN / ROLLBACK",
}
PROBE = "  of which changed keys"
REFERENCE = "ref: bare fingerprint scan"


def _wrap(owner: Any, name: str, label: str | Callable[..., str]) -> None:
    """Time calls of `owner.name` as `label`; a name this version of the engine lacks is skipped."""
    original = getattr(owner, name, None)
    if original is None:
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        text = label(*args, **kwargs) if callable(label) else label
        with PROFILER.step(text):
            return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def install_profiler() -> None:
    for name, label in STEP_OF.items():
        _wrap(DuckDBSession, name, label)
    for name in (
        "add_entry",
        "add_source",
        "add_snapshot",
        "add_build_key",
        "add_entry_model",
        "add_publication",
    ):
        _wrap(HistoryWriter, name, "history writes")
    for name, value in list(vars(HistoryReader).items()):
        if callable(value) and not name.startswith("_"):
            _wrap(HistoryReader, name, "history reads")
    _wrap(engine_run, "load_context", "load + compile")
    _wrap(opening_module, "migrate", "migrations check")

    original_connect = opening_module.connect

    @contextmanager
    def connect(path: Path, **kwargs: Any) -> Iterator[duckdb.DuckDBPyConnection]:
        manager = original_connect(path, **kwargs)
        with PROFILER.step("open connection"):
            con = manager.__enter__()
        try:
            yield con
        finally:
            with PROFILER.step("close (checkpoint)"):
                manager.__exit__(None, None, None)

    opening_module.connect = connect

    original_keys = session_module.create_keys_table

    def create_keys_table(con, name, relation, keys, window, deleted_from, merge_keys, *rest, files):  # type: ignore[no-untyped-def]  # the wrapped function's signature
        if deleted_from is not None and PROFILER.current is not None:
            # How much of the keys table is the deleted-key anti-join: build the changed keys alone
            # first (extra work, subtracted from the run's total), then the real table.
            cpu, started = cpu_seconds(), time.perf_counter()
            original_keys(con, f"{name}__probe", relation, keys, window, None, merge_keys, *rest, files=files)
            shared_tables_module.drop_table(con, f"{name}__probe", files)
            spent, spent_cpu = time.perf_counter() - started, cpu_seconds() - cpu
            current = PROFILER.current
            current.charge(PROBE, spent, spent_cpu)
            current.charge(PROFILER.stack[0], -spent, -spent_cpu)  # not part of the enclosing step
            current.extra += spent
            current.extra_cpu += spent_cpu
        return original_keys(con, name, relation, keys, window, deleted_from, merge_keys, *rest, files=files)

    session_module.create_keys_table = create_keys_table

    def statement_runner(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(
            con: duckdb.DuckDBPyConnection, statement: exp.Expression, params: Any = None, **options: Any
        ) -> Any:
            text = render(statement)  # before the call: a consumed statement may be rewritten by it
            started = time.perf_counter()
            result = original(con, statement, params, **options)
            if PROFILER.current is not None:
                step = PROFILER.stack[0] if PROFILER.stack else "(no step)"
                PROFILER.current.statements.append((step, text, time.perf_counter() - started))
            return result

        return run

    for module in (figures_module, key_figures_module, shared_tables_module, snapshot_files_module):
        module.run = statement_runner(module.run)  # type: ignore[attr-defined]  # the module's imported run


def profiled(label: str, call: Callable[[], object]) -> Breakdown:
    breakdown = Breakdown(label)
    PROFILER.current = breakdown
    cpu, started = cpu_seconds(), time.perf_counter()
    try:
        call()
    finally:
        breakdown.total = time.perf_counter() - started - breakdown.extra
        breakdown.total_cpu = cpu_seconds() - cpu - breakdown.extra_cpu
        PROFILER.current = None
    return breakdown


def profile_scenario(
    name: str, project: Path, files: Files, engine: Path, full: Path, source_scan: str
) -> list[Breakdown]:
    copy(files.engine, engine)
    copy(files.full, full)
    found = [
        profiled(
            f"{name}\nincremental",
            lambda: check_paths(run_project(project, engine, only_stale=True), "delta"),
        ),
        profiled(f"{name}\nfull rebuild", lambda: check_paths(run_project(project, full), "full")),
    ]
    copy(files.engine, engine)  # the bare scan on the same state, for reference
    cpu, started = cpu_seconds(), time.perf_counter()
    execute(engine, [source_scan])
    found[0].charge(REFERENCE, time.perf_counter() - started, cpu_seconds() - cpu)
    return found


# -- report --------------------------------------------------------------------------------------


def report(
    rows: int, repeat: int, scenarios: list[Scenario], verbose: bool, unique: bool, versioning: str
) -> None:
    pin = f", versioning {versioning}" + ("" if unique else ", no unique pin")
    table = Table(
        title=f"strata incremental vs DuckDB floor and full rebuild, {rows:,} orders, {repeat} interleaved repeats{pin}"
    )
    for column in ("scenario", "ratio a / b", "a s\nbest / median", "b s\nbest / median"):
        table.add_column(column, justify="left" if column in ("scenario", "ratio a / b") else "right")
    for column in ("ratio\nbest / median", "cpu ratio\nbest"):
        table.add_column(column, justify="right")
    table.add_column("target")
    table.add_column("verdict\n(best)")
    for s in scenarios:
        assert s.sides is not None
        inc, full, floor, scan = s.sides.incremental, s.sides.full, s.sides.floor, s.sides.fingerprint
        comparisons = [
            ("inc / floor", inc, floor, f"<= {TARGET_VS_FLOOR}x", lambda r: r <= TARGET_VS_FLOOR),
            ("full / inc", full, inc, f">= {TARGET_VS_FULL}x", lambda r: r >= TARGET_VS_FULL),
            ("scan / floor", scan, floor, "info", None),
        ]
        if s.sides.unserved is not None:
            comparisons.insert(
                2,
                (
                    "inc / inc without serving",
                    inc,
                    s.sides.unserved,
                    f"<= {TARGET_VS_UNSERVED:.2f}x",
                    lambda r: r <= TARGET_VS_UNSERVED,
                ),
            )
        for index, (label, top, bottom, target, passes) in enumerate(comparisons):
            best, cells = ratio_cells(top, bottom)
            if passes is None:
                verdict = "[dim]info[/dim]"
            else:
                verdict = "[green]PASS[/green]" if passes(best) else "[red]MISS[/red]"
            table.add_row(
                s.name if index == 0 else "",
                label,
                *cells,
                target,
                verdict,
                end_section=index == len(comparisons) - 1,
            )
    console.print(table)
    for s in scenarios:
        up, ap = s.details[UPSERT], s.details[APPEND_MODEL]
        console.print(
            f"  {s.name}: {UPSERT} read {up.get('rows_read'):,} window rows, {up.get('changed_keys'):,} changed keys, "
            f"merged {up.get('rows_merged'):,}, replaced {up.get('rows_replaced'):,}, deleted-key check "
            f"{'yes' if up.get('deleted_keys_checked') else 'no'}; {APPEND_MODEL} merged {ap.get('rows_merged'):,} "
            f"(pushdown {ap.get('pushdown')})"
        )
        if verbose:
            assert s.sides is not None
            for side in ("incremental", "unserved", "full", "floor", "fingerprint"):
                timings: Timings | None = getattr(s.sides, side)
                if timings is None:
                    continue
                console.print(
                    f"    {side:<11} wall {format_seconds(timings.wall)}; cpu {format_seconds(timings.cpu)}"
                )
    console.print(
        "  verified after every repeat (row-hash multisets): incremental upsert = full rebuild = floor; "
        "incremental append = floor (previous rows + window)"
    )
    console.print(f"  floor: {FLOOR_IS}")
    console.print(f"  full rebuild: {FULL_IS}")
    console.print(f"  machine: {machine()}")
    console.print("  load average after the runs: " + " ".join(f"{value:.2f}" for value in os.getloadavg()))
    console.print(f"  engine: strata_dagster imported from {Path(strata_dagster.__file__).parent}")


def report_profile(breakdowns: list[Breakdown], statements: int) -> None:
    steps: list[str] = []
    for breakdown in breakdowns:
        steps.extend(step for step in breakdown.steps if step not in steps)
    steps.sort(key=lambda step: (step == REFERENCE, -max(b.steps.get(step, 0.0) for b in breakdowns)))
    table = Table(title="where the time goes: one instrumented run each, wall s/process CPU s")
    table.add_column("step", no_wrap=True)
    for breakdown in breakdowns:
        table.add_column(breakdown.label, justify="right")
    for step in steps:
        if step in (REFERENCE, PROBE):
            continue
        table.add_row(step, *(_cell(b, step) for b in breakdowns))
        if step == KEYS_TABLE and PROBE in steps:
            table.add_row(PROBE, *(_cell(b, PROBE) for b in breakdowns))
        if step == WINDOW_STATS:
            table.add_row(
                f"  of which max({CDC})",
                *("" if (t := _max_scans(b)) is None else f"{t:.2f}" for b in breakdowns),
            )

    def rest(b: Breakdown, values: dict[str, float], total: float) -> float:
        return total - sum(v for k, v in values.items() if k not in (PROBE, REFERENCE))

    table.add_row(
        "other (python)",
        *(f"{rest(b, b.steps, b.total):.2f}/{rest(b, b.cpu, b.total_cpu):.2f}" for b in breakdowns),
        end_section=True,
    )
    table.add_row(
        "[bold]total run_project[/bold]",
        *(f"[bold]{b.total:.2f}/{b.total_cpu:.2f}[/bold]" for b in breakdowns),
    )
    if REFERENCE in steps:
        table.add_row(REFERENCE, *(_cell(b, REFERENCE) for b in breakdowns))
    console.print(table)
    for breakdown in breakdowns:
        top = sorted(breakdown.statements, key=lambda item: -item[2])[:statements]
        console.print(f"  slowest statements, {breakdown.label.replace(chr(10), ' ')}:")
        for step, sql, seconds in top:
            line = f"    {seconds:7.3f}  [{step}] {' '.join(sql.split())}"
            console.print(line[: console.width - 1], highlight=False, markup=False, soft_wrap=True)


def _cell(breakdown: Breakdown, step: str) -> str:
    if step not in breakdown.steps:
        return ""
    return f"{breakdown.steps[step]:.2f}/{breakdown.cpu[step]:.2f}"


def main() -> None:
    parser = bench_arguments(__doc__)
    parser.add_argument(
        "--profile", action="store_true", help="also run each scenario once instrumented: time per step"
    )
    parser.add_argument(
        "--statements", type=int, default=8, help="slowest statements listed per profiled run"
    )
    parser.add_argument(
        "--no-unique",
        action="store_true",
        help=f"drop the `unique` pin of {UPSERT} (the full rebuild's costliest check)",
    )
    add_versioning_argument(parser)
    parser.add_argument(
        "--serving-baseline",
        action="store_true",
        help="also time each incremental run with the serving refresh skipped, on its own copy (issue 19)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-bench-inc-", dir=args.dir) as work:
        scenarios, breakdowns = bench(
            args.rows,
            args.repeat,
            Path(work),
            args.profile,
            not args.no_unique,
            args.versioning,
            args.serving_baseline,
        )
    report(args.rows, args.repeat, scenarios, args.verbose, not args.no_unique, args.versioning)
    if breakdowns:
        report_profile(breakdowns, args.statements)


if __name__ == "__main__":
    main()
