"""Engine benchmark: each `run_project` scenario against the plain-DuckDB floor of the same work.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_engine.py [--rows 10000000] [--repeat 5]

Both sides run in this process, on the same data, interleaved (the side that goes first alternates),
and each timing is the wall time around one call, connection open and close included. See
bench/README.md for how to read the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console
from rich.table import Table
from sqlglot import exp

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.opening import open_session, read_source_schemas
from strata_dagster.compile import compile_project, source_relation
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema, view_name
from strata_dagster.engine.run import run_project
from strata_dagster.language import load_project

PROJECT = """
source orders { table: raw.orders }
source customers { table: raw.customers }

model orders_clean {
  from orders
  let order_day = cast(order_ts as date)
  filter status <> 'cancelled'
  select order_id, customer_id, order_day, status, amount, channel
}

model daily {
  from orders_clean
  group order_day
  aggregate revenue = sum(amount), n = count(*)
}

model customers_by_region {
  from customers
  group region
  aggregate n = count(*)
}
"""
ORDERS_MODELS = ("orders_clean", "daily")  # the models that read raw.orders

# What the engine computes per source to decide staleness (sql/content.py), bare.
FINGERPRINT = "SELECT count(*), sum(hash(t)::HUGEINT) FROM raw.orders AS t"
# What strata hashes per row of raw.orders for each `versioning` of the source in the incremental
# and partition benches (their changes all advance updated_at, so the cdc contract holds).
SOURCE_SCANS = {
    # What the engine reads of a cdc source: its row count and the change column's range.
    "cdc": "SELECT count(*), min(t.updated_at), max(t.updated_at) FROM raw.orders AS t",
    "full": FINGERPRINT,
}
VERSIONING_LINES = {"cdc": "  versioning: cdc(updated_at)\n", "full": "  versioning: full\n"}
FINGERPRINTS = (FINGERPRINT, "SELECT count(*), sum(hash(t)::HUGEINT) FROM raw.customers AS t")
# The source of bench_incremental and bench_partitions: raw.orders of write_sample_data without its
# `tags` list column (hashing a list per row would dominate every scan and say nothing about merging
# or partitions), and without raw.customers.
NARROW = (
    "CREATE TABLE raw.orders_narrow AS SELECT order_id, customer_id, order_ts, updated_at, status, amount, "
    "channel FROM raw.orders ORDER BY order_id",
    "DROP TABLE raw.orders",
    "DROP TABLE raw.customers",
    "ALTER TABLE raw.orders_narrow RENAME TO orders",
)
# 1% new orders: new order_ids, placed a year later, updated after every existing row.
APPEND = """
INSERT INTO raw.orders
SELECT o.order_id + m.max_id, o.customer_id, o.order_ts + INTERVAL 1 YEAR,
       m.max_updated + to_seconds(o.order_id), o.status, o.amount, o.channel, o.tags
FROM raw.orders AS o,
     (SELECT max(order_id) AS max_id, max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE o.order_id <= ?
"""
console = Console(width=max(120, shutil.get_terminal_size().columns))


@dataclass(frozen=True)
class Timings:
    wall: list[float]
    cpu: list[float]  # user + system seconds of this process (all DuckDB threads included)


@dataclass(frozen=True)
class Scenario:
    name: str
    strata: Timings
    floor: Timings
    target: float | None
    floor_is: str

    def ratio(self, pick: Callable[[list[float]], float], cpu: bool = False) -> float:
        if cpu:
            return pick(self.strata.cpu) / pick(self.floor.cpu)
        return pick(self.strata.wall) / pick(self.floor.wall)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(call: Callable[[], object], into: Timings) -> None:
    os.sync()  # flush earlier writes (file copies, the other side's tables) outside the clock
    cpu, started = cpu_seconds(), time.perf_counter()
    call()
    into.wall.append(time.perf_counter() - started)
    into.cpu.append(cpu_seconds() - cpu)


def interleave(
    repeat: int, prepare: Callable[[], None], strata: Callable[[], object], floor: Callable[[], object]
) -> tuple[Timings, Timings]:
    """Time both sides `repeat` times on freshly prepared state; the side that goes first alternates."""
    mine, theirs = Timings([], []), Timings([], [])
    for i in range(repeat):
        prepare()
        sides = [(strata, mine), (floor, theirs)]
        for call, into in sides if i % 2 == 0 else sides[::-1]:
            timed(call, into)
    return mine, theirs


def floor_statements(project_dir: Path, warehouse: Path, models: tuple[str, ...]) -> list[str]:
    """`CREATE TABLE <model> AS <the compiled query>`, models reading each other's plain tables."""
    project = load_project(project_dir)
    compiled = compile_project(project, read_source_schemas(warehouse, project))

    def relation(name: str) -> exp.Table:
        if name in project.sources:
            return source_relation(project.sources[name])
        return exp.to_table(name)

    return [
        exp.Create(
            this=exp.to_table(name), kind="TABLE", expression=compiled.models[name].bound(relation)
        ).sql(dialect="duckdb")
        for name in project.order
        if name in models
    ]


def execute(warehouse: Path, statements: list[str] | tuple[str, ...]) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        for statement in statements:
            con.execute(statement).fetchall()
    finally:
        con.close()


def write_narrow_source(source: Path, rows: int, **sample: Any) -> None:
    """`rows` orders of write_sample_data (`sample`: its other arguments) narrowed by NARROW, in a
    migrated warehouse: every copy starts with the history tables, so no side pays for them."""
    write_sample_data(source, rows, **sample)
    execute(source, NARROW)
    with open_session(source):
        pass


def paths_of(result) -> dict[str, str]:
    return {outcome.model: outcome.path for outcome in result.outcomes}


def check_paths(result, expected: dict[str, str]) -> None:
    paths = paths_of(result)
    assert paths == expected, f"unexpected build paths {paths}, expected {expected}"


def copy(source: Path, target: Path) -> None:
    copy_warehouse(source, target)
    # Flush the copy now: else the first fsync inside a clock (a run's COMMIT) pays for it.
    os.sync()


def copy_warehouse(source: Path, target: Path) -> None:
    """The warehouse file and its serving copy as `source` left them (a serving copy in the state
    its own runs keep it: what is exported stays exported). Snapshot files stay where they are:
    the copy's views read them by absolute path (backends/duckdb/snapshot_files.py)."""
    Path(f"{target}.wal").unlink(missing_ok=True)
    shutil.copyfile(source, target)
    served, copied = Path(f"{source}.serving"), Path(f"{target}.serving")
    shutil.rmtree(copied, ignore_errors=True)
    if served.is_dir():
        shutil.copytree(served, copied, symlinks=True)


def view(model: str, catalog: str) -> str:
    return f"{catalog}.{branch_schema(DEFAULT_BRANCH)}.{view_name(model)}"


def source_fingerprint(path: Path) -> tuple[int, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        count, total = con.execute(FINGERPRINT).fetchone()
        return int(count), int(total)
    finally:
        con.close()


def write_floor(floor: Path, built: Path, models: tuple[str, ...], query: str) -> object:
    """The previous results of `models` in strata's `built` as plain tables in `floor`: exactly what
    strata's views expose. Returns the first value of `query`, run in `floor` after."""
    con = duckdb.connect(str(floor))
    try:
        con.execute(f"ATTACH '{built}' AS built (READ_ONLY)")
        for model in models:
            con.execute(f"CREATE TABLE main.{model} AS SELECT * FROM {view(model, 'built')}")
        con.execute("DETACH built")
        return con.execute(query).fetchone()[0]
    finally:
        con.close()


def machine() -> str:
    con = duckdb.connect()
    threads, memory = con.execute(
        "SELECT current_setting('threads'), current_setting('memory_limit')"
    ).fetchone()
    con.close()
    return (
        f"nproc {len(os.sched_getaffinity(0))} (cpu_count {os.cpu_count()}), duckdb {duckdb.__version__} "
        f"(threads {threads}, memory_limit {memory}), python {platform.python_version()}, {platform.machine()}"
    )


def bench(rows: int, repeat: int, work: Path) -> list[Scenario]:
    project = work / "project"
    project.mkdir()
    (project / "bench.strata").write_text(PROJECT)
    base, built, appended = work / "base.duckdb", work / "built.duckdb", work / "appended.duckdb"
    mine, theirs = work / "engine.duckdb", work / "floor.duckdb"  # not strata.duckdb: see README
    console.print(f"writing {rows:,} orders into {base} ...")
    write_sample_data(base, rows)
    all_models = tuple(load_project(project).order)
    full_sql = floor_statements(project, base, all_models)
    append_sql = floor_statements(project, base, ORDERS_MODELS)

    def fresh(source: Path) -> Callable[[], None]:
        def prepare() -> None:
            for target in (mine, theirs):
                copy_warehouse(source, target)

        return prepare

    console.print("full build ...")
    full = interleave(
        repeat,
        fresh(base),
        lambda: check_paths(run_project(project, mine), dict.fromkeys(all_models, "full")),
        lambda: execute(theirs, full_sql),
    )
    copy_warehouse(mine, built)  # up to date: the last strata full build
    _assert_noop(run_project(project, built, only_stale=True))  # untimed: the copy's own serving catalog

    console.print("no-change run ...")
    noop = interleave(
        repeat,
        lambda: None,
        lambda: _assert_noop(run_project(project, built, only_stale=True)),
        lambda: execute(built, FINGERPRINTS),
    )

    copy_warehouse(built, appended)
    con = duckdb.connect(str(appended))
    con.execute(APPEND, [max(1, rows // 100)])
    con.close()
    console.print("1% append ...")
    expected = dict.fromkeys(all_models, "reused") | dict.fromkeys(ORDERS_MODELS, "full")
    append = interleave(
        repeat,
        fresh(appended),
        lambda: check_paths(run_project(project, mine, only_stale=True), expected),
        lambda: execute(theirs, FINGERPRINTS + tuple(append_sql)),
    )
    return [
        Scenario("full build", *full, 1.3, "CREATE TABLE AS of the 3 compiled queries"),
        Scenario("no-change run", *noop, 1.5, "fingerprint scan of raw.orders + raw.customers"),
        Scenario(
            "1% append",
            *append,
            None,
            "fingerprint scan of both sources + CREATE TABLE AS of orders_clean and daily",
        ),
    ]


def _assert_noop(result) -> None:
    assert result.is_noop, f"expected nothing to do, got {[(o.model, o.path) for o in result.outcomes]}"


def format_seconds(times: list[float]) -> str:
    return " ".join(f"{t:.3f}" for t in times)


def format_best_median(times: list[float]) -> str:
    return f"{min(times):.3f} / {statistics.median(times):.3f}"


def ratio_cells(top: Timings, bottom: Timings) -> tuple[float, list[str]]:
    """The best wall ratio of `top` to `bottom`, and the table cells: each side's best / median
    seconds, the ratio's best / median, the best CPU ratio."""
    best = min(top.wall) / min(bottom.wall)
    median = statistics.median(top.wall) / statistics.median(bottom.wall)
    return best, [
        format_best_median(top.wall),
        format_best_median(bottom.wall),
        f"{best:.2f} / {median:.2f}",
        f"{min(top.cpu) / min(bottom.cpu):.2f}",
    ]


def report(rows: int, repeat: int, scenarios: list[Scenario], verbose: bool) -> None:
    table = Table(title=f"strata engine vs DuckDB floor, {rows:,} orders, {repeat} interleaved repeats")
    for column in ("scenario", "strata s\nbest / median", "floor s\nbest / median", "ratio\nbest / median"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    table.add_column("cpu ratio\nbest", justify="right")
    table.add_column("target")
    table.add_column("verdict\n(best)")
    for s in scenarios:
        best, median = s.ratio(min), s.ratio(statistics.median)
        if s.target is None:
            target, verdict = "none yet", "[dim]info[/dim]"
        else:
            target = f"<= {s.target}x"
            verdict = "[green]PASS[/green]" if best <= s.target else "[red]MISS[/red]"
        table.add_row(
            s.name,
            format_best_median(s.strata.wall),
            format_best_median(s.floor.wall),
            f"{best:.2f} / {median:.2f}",
            f"{s.ratio(min, cpu=True):.2f}",
            target,
            verdict,
        )
    console.print(table)
    if verbose:
        for s in scenarios:
            console.print(
                f"  {s.name} wall: strata {format_seconds(s.strata.wall)}; floor {format_seconds(s.floor.wall)}"
            )
            console.print(
                f"  {s.name} cpu:  strata {format_seconds(s.strata.cpu)}; floor {format_seconds(s.floor.cpu)}"
            )
    for s in scenarios:
        console.print(f"  floor of {s.name}: {s.floor_is}")
    console.print(f"  machine: {machine()}")


def bench_arguments(doc: str, repeat_help: str = "interleaved repeats per scenario (default 5)"):
    """The options every bench takes: --rows, --repeat, --dir, --verbose; `doc` is the module's."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="orders in the source (default 10M)")
    parser.add_argument("--repeat", type=int, default=5, help=repeat_help)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the temp dir goes (default: system temp)"
    )
    parser.add_argument("--verbose", action="store_true", help="also print every timing, in run order")
    return parser


def add_versioning_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--versioning",
        choices=sorted(VERSIONING_LINES),
        default="cdc",
        help="how raw.orders is versioned: cdc(updated_at), its change column (default), or full rows",
    )


def with_versioning(project: str, versioning: str) -> str:
    """`project` with raw.orders's `versioning` line for `versioning` (the line it has is cdc's)."""
    return project.replace(VERSIONING_LINES["cdc"], VERSIONING_LINES[versioning])


def main() -> None:
    args = bench_arguments(__doc__).parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-bench-", dir=args.dir) as work:
        scenarios = bench(args.rows, args.repeat, Path(work))
    report(args.rows, args.repeat, scenarios, args.verbose)


if __name__ == "__main__":
    main()
