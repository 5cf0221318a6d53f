"""Row-wise benchmark: a model over a keyed source with no change column (`versioning: full`,
the default), rebuilt by the key blocks whose rows changed, against the DuckDB floor that finds
and applies the same changes by content, and against a full rebuild through strata.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_row_wise.py [--rows 10000000] [--repeat 3]

Scenarios, each from the first build: a 1% append, 0.1% of the orders updated across the whole key
range (some leave the model's filter, some enter it), 0.1% deleted. The sides (incremental run,
content floor, full rebuild) run in this process on copies of the same state, interleaved (the
side that goes first rotates); each timing is the wall time around one call, connection open and
close included. After every repeat the three results are compared (row-hash multisets), so a
wrong delta fails the bench instead of producing a number. See bench/README.md.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from bench_engine import (
    Timings,
    bench_arguments,
    console,
    copy,
    execute,
    format_seconds,
    machine,
    paths_of,
    ratio_cells,
    view,
    write_floor,
    write_narrow_source,
)
from bench_incremental import APPEND, UPDATE, Files, multiset_mismatch, rotate, scenario_files
from rich.table import Table

from strata_dagster.engine.run import run_project

MODEL = "orders_clean"
PROJECT = f"""
source orders {{
  table: raw.orders
  key: [order_id]
}}

model {MODEL} {{
  from orders
  let order_day = cast(order_ts as date)
  filter status <> 'cancelled'
  select order_id, customer_id, order_day, status, amount, channel
}}
"""
# 0.1% of the orders (every 1000th id, from the id given) deleted from the source.
DELETE = "DELETE FROM raw.orders WHERE order_id % 1000 = ?"
# The floor's figures: row count and row-hash sum per block of 64 consecutive order ids, the
# same slicing strata uses (sql/segments.py, KEY_BLOCK), kept as a plain table between runs.
FLOOR_BLOCKS = "SELECT order_id // 64 AS block, count(*) AS n, sum(hash(o)::HUGEINT) AS h FROM raw.orders AS o GROUP BY 1"
FLOOR_BUILD = (f"CREATE TABLE main.blocks AS {FLOOR_BLOCKS}",)
# The floor: one transaction on plain tables holding the previous result and the previous figures.
# One grouped scan of the source; the blocks whose figures differ; their rows recomputed and
# compared with the rows the result holds for them, so only the rows that differ are deleted and
# inserted (order_id is unique in this source: a changed row is deleted by its key); the figures
# replaced. No fingerprint, no content hash, no history, no immutable snapshot: the least work
# that finds and applies changes by content.
CHANGED_BLOCKS = "order_id // 64 IN (SELECT block FROM changed)"
FLOOR = (
    "BEGIN TRANSACTION",
    f"CREATE TEMPORARY TABLE blocks_now AS {FLOOR_BLOCKS}",
    "CREATE TEMPORARY TABLE changed AS SELECT coalesce(now.block, before.block) AS block "
    "FROM blocks_now AS now FULL JOIN main.blocks AS before ON now.block = before.block "
    "WHERE now.n IS DISTINCT FROM before.n OR now.h IS DISTINCT FROM before.h",
    "CREATE TEMPORARY TABLE rows_now AS "
    "SELECT order_id, customer_id, CAST(order_ts AS DATE) AS order_day, status, amount, channel "
    f"FROM raw.orders WHERE status <> 'cancelled' AND {CHANGED_BLOCKS}",
    f"CREATE TEMPORARY TABLE rows_before AS SELECT * FROM main.{MODEL} WHERE {CHANGED_BLOCKS}",
    f"DELETE FROM main.{MODEL} WHERE order_id IN "
    "(SELECT order_id FROM (SELECT * FROM rows_before EXCEPT ALL SELECT * FROM rows_now))",
    f"INSERT INTO main.{MODEL} BY NAME SELECT * FROM rows_now EXCEPT ALL SELECT * FROM rows_before",
    "DELETE FROM main.blocks",
    "INSERT INTO main.blocks SELECT * FROM blocks_now",
    "COMMIT",
)
FLOOR_IS = (
    "one connection on a copy holding the previous result and its per-block figures (count, row-hash sum "
    "per 64 order ids) as plain tables; in one transaction: the grouped scan of raw.orders, the blocks whose "
    "figures differ, their rows recomputed and compared with the result's (EXCEPT ALL), DELETE and INSERT "
    "of the rows that differ, the figures replaced. No fingerprint, no content hash, no snapshot file, "
    "no history"
)
FULL_IS = "run_project on a copy of the changed source with no strata state (the model built in full)"
TARGET_VS_FLOOR = 1.2  # incremental / content floor at most (issue 45's default target)


@dataclass
class Scenario:
    name: str
    change: str
    params: list[Any]
    incremental: Timings = field(default_factory=lambda: Timings([], []))
    floor: Timings = field(default_factory=lambda: Timings([], []))
    full: Timings = field(default_factory=lambda: Timings([], []))
    detail: dict[str, Any] = field(default_factory=dict)


def prepare_templates(rows: int, work: Path, project: Path) -> tuple[Path, Path, Path]:
    """The unchanged states: the source alone, strata's first build on it, the floor's copy."""
    source, built, floor = work / "source.duckdb", work / "built.duckdb", work / "floor_built.duckdb"
    console.print(f"writing {rows:,} orders into {source} ...")
    write_narrow_source(source, rows)
    copy(source, built)
    console.print("first build through strata ...")
    paths = paths_of(run_project(project, built))
    assert paths == {MODEL: "full"}, paths
    copy(source, floor)
    write_floor(floor, built, (MODEL,), f"SELECT count(*) FROM main.{MODEL}")
    execute(floor, FLOOR_BUILD)
    return source, built, floor


def verify(name: str, engine: Path, full: Path, floor: Path) -> None:
    """The incremental result equals the full rebuild and the floor's (row-hash multisets)."""
    con = duckdb.connect()
    try:
        for alias, path in (("inc", engine), ("fullw", full), ("floorw", floor)):
            con.execute(f"ATTACH '{path}' AS {alias} (READ_ONLY)")
        for label, other in (("full rebuild", view(MODEL, "fullw")), ("floor", f"floorw.main.{MODEL}")):
            left, right, mismatched = multiset_mismatch(con, view(MODEL, "inc"), other)
            assert mismatched == 0 and left == right, (
                f"{name}: incremental vs {label} differ: {left} vs {right} rows, "
                f"{mismatched} row hash(es) with other multiplicities"
            )
    finally:
        con.close()


def bench(rows: int, repeat: int, work: Path) -> list[Scenario]:
    project = work / "project"
    project.mkdir()
    (project / "bench.strata").write_text(PROJECT)
    source, built, floor_built = prepare_templates(rows, work, project)
    engine, full, floor = work / "engine.duckdb", work / "full.duckdb", work / "floor.duckdb"
    scenarios = [
        Scenario("1% append", APPEND, [max(1, rows // 100)]),
        Scenario("0.1% update", UPDATE, [7]),
        Scenario("0.1% delete", DELETE, [3]),
    ]
    for scenario in scenarios:
        files = scenario_files(scenario, work, source, built, floor_built)  # type: ignore[arg-type]  # the same fields

        def prepare(files: Files = files) -> None:
            copy(files.engine, engine)
            copy(files.full, full)
            copy(files.floor, floor)

        def incremental(scenario: Scenario = scenario) -> None:
            result = run_project(project, engine, only_stale=True)
            (outcome,) = result.outcomes
            assert outcome.path == "partitions", (
                f"{scenario.name}: built by {outcome.path}, not by key blocks"
            )
            scenario.detail = outcome.detail

        def rebuilt() -> None:
            assert paths_of(run_project(project, full)) == {MODEL: "full"}

        console.print(f"{scenario.name} ...")
        rotate(
            repeat,
            prepare,
            [
                (incremental, scenario.incremental),
                (lambda: execute(floor, FLOOR), scenario.floor),
                (rebuilt, scenario.full),
            ],
            lambda scenario=scenario: verify(scenario.name, engine, full, floor),
        )
    return scenarios


def report(rows: int, repeat: int, scenarios: list[Scenario], verbose: bool) -> None:
    table = Table(
        title=f"a row-wise model over a keyed `versioning: full` source, {rows:,} orders, {repeat} interleaved repeats"
    )
    for column in ("scenario", "ratio a / b", "a s\nbest / median", "b s\nbest / median"):
        table.add_column(column, justify="left" if column in ("scenario", "ratio a / b") else "right")
    for column in ("ratio\nbest / median", "cpu ratio\nbest", "target"):
        table.add_column(column, justify="right")
    for s in scenarios:
        comparisons = [
            ("inc / content floor", s.incremental, s.floor, f"<= {TARGET_VS_FLOOR}x"),
            ("full / inc", s.full, s.incremental, "info"),
        ]
        for index, (label, top, bottom, target) in enumerate(comparisons):
            table.add_row(
                s.name if index == 0 else "",
                label,
                *ratio_cells(top, bottom)[1],
                target,
                end_section=index == len(comparisons) - 1,
            )
    console.print(table)
    for s in scenarios:
        detail = s.detail
        console.print(
            f"  {s.name}: {len(detail.get('partitions', ())):,} key blocks recomputed of "
            f"{detail.get('partitions_total', 0):,}, {detail.get('partitions_unchanged', 0):,} of them unchanged; "
            f"{detail.get('rows_merged', '?'):,} rows written, {detail.get('rows_replaced', '?'):,} replaced"
        )
        if verbose:
            for side in ("incremental", "floor", "full"):
                timings: Timings = getattr(s, side)
                console.print(
                    f"    {side:<11} wall {format_seconds(timings.wall)}; cpu {format_seconds(timings.cpu)}"
                )
    console.print("  verified after every repeat (row-hash multisets): incremental = full rebuild = floor")
    console.print(f"  floor: {FLOOR_IS}")
    console.print(f"  full rebuild: {FULL_IS}")
    console.print(f"  machine: {machine()}")
    console.print("  load average after the runs: " + " ".join(f"{value:.2f}" for value in os.getloadavg()))


def main() -> None:
    parser = bench_arguments(__doc__, "interleaved repeats per scenario (default 3)")
    parser.set_defaults(repeat=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-bench-row-wise-", dir=args.dir) as work:
        scenarios = bench(args.rows, args.repeat, Path(work))
    report(args.rows, args.repeat, scenarios, args.verbose)


if __name__ == "__main__":
    main()
