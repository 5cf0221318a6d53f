"""View benchmark: a staging model as `materialize: view` against the same model as a table, after
late updates to 0.1% of the orders, and the DuckDB floor of the same result (staging as a view);
then after a change to another source only (the view's rows stay: its export is served again).

    PYTHONPATH=.:bench .venv/bin/python bench/bench_views.py [--rows 10000000] [--repeat 5] [--versioning cdc|full] [--key]

`--key` declares `key: [order_id]` on the orders: a staging table over them is then maintained by
the key blocks whose rows changed (with `--versioning full`), where without it, or a change
column, it is built in full.

The three sides run in this process, on the same data, interleaved (the side that goes first
rotates), and each timing is the wall time around one call, connection open and close included.
After every repeat both strata variants are checked against a full recomputation (row-hash
multisets) and the view variant's staging snapshot must be a view. See bench/README.md.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

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
    machine,
    paths_of,
    timed,
    with_versioning,
    write_floor,
)
from bench_partitions import DAYS, LATE_UPDATE, START, multiset_mismatch

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.reads.readers import reader_statement_for
from strata_dagster.engine.run import run_project
from strata_dagster.language import load_project

PROJECT = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model stg_orders {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  derive is_large = amount >= 500
  select order_id, customer_id, status, amount, order_ts, updated_at, order_day, is_large, channel
MATERIALIZE}

model daily {
  from stg_orders
  group order_day, channel
  aggregate revenue = sum(amount), n = count(*), large = count(*) filter (where is_large)
  partitioned_by: day(order_day)
}

source fx {
  table: raw.fx
}

model rates {
  from fx
}
"""
FX = "CREATE TABLE raw.fx AS SELECT 'EUR' AS currency, CAST(1.0 AS DOUBLE) AS rate"
FX_UPDATE = "UPDATE raw.fx SET rate = rate + 0.01"
VARIANTS = {"view": "  materialize: view\n", "table": ""}
RECOMPUTE = (
    "SELECT CAST(order_ts AS DATE) AS order_day, channel, sum(amount) AS revenue, count(*) AS n, "
    "count(*) FILTER (WHERE amount >= 500) AS large FROM {orders} WHERE status <> 'cancelled' {where} GROUP BY ALL"
)
COLUMNS = ("order_day", "channel", "revenue", "n", "large")
FLOOR_IS = (
    "staging as a plain VIEW (nothing to do for it), then in one transaction DELETE the changed days from a "
    "plain `daily` table and INSERT them recomputed from raw.orders (day ranges of order_ts); the floor is "
    "TOLD which days changed: no fingerprint scan, no content hash, no history, no immutable segment"
)


def changed_days(engine: Path, old_max: object) -> list[str]:
    con = duckdb.connect(str(engine), read_only=True)
    try:
        rows = con.execute(
            "SELECT DISTINCT CAST(order_ts AS DATE) FROM raw.orders WHERE updated_at > ? ORDER BY 1",
            [old_max],
        ).fetchall()
    finally:
        con.close()
    return [str(row[0]) for row in rows]


def floor_statements(days: list[str]) -> list[str]:
    ranges = " OR ".join(
        f"(order_ts >= TIMESTAMP '{day}' AND order_ts < TIMESTAMP '{day}' + INTERVAL 1 DAY)" for day in days
    )
    listed = ", ".join(f"DATE '{day}'" for day in days)
    return [
        "BEGIN TRANSACTION",
        f"DELETE FROM daily WHERE order_day IN ({listed})",
        "INSERT INTO daily BY NAME " + RECOMPUTE.format(orders="raw.orders", where=f"AND ({ranges})"),
        "COMMIT",
    ]


def check(engine: Path, relation: str, is_view: bool) -> None:
    con = duckdb.connect(str(engine), read_only=True)
    try:
        expected = f"({RECOMPUTE.format(orders='raw.orders', where='')})"
        left, right, mismatched = multiset_mismatch(con, COLUMNS, relation, expected)
        assert mismatched == 0 and left == right, (
            f"{relation}: {left} vs {right} rows, {mismatched} mismatched"
        )
        # A view model's snapshot is a view over its inputs; a stored snapshot is a table or a view
        # over its Parquet file (backends/duckdb/snapshot_files.py).
        stored = con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE schema_name = 'strata_snapshots' AND view_name LIKE '%_stg_orders' "
            "AND NOT contains(sql, 'read_parquet(')"
        ).fetchone()[0]
        assert (stored > 0) == is_view, f"staging stored as a view: {stored > 0}, expected {is_view}"
    finally:
        con.close()


def bench(rows: int, repeat: int, work: Path, versioning: str, key: bool = False) -> dict[str, object]:
    source = work / "source.duckdb"
    console.print(f"writing {rows:,} orders over {DAYS} days ...")
    write_sample_data(source, rows, days=DAYS, start=START)
    execute(source, [*NARROW, FX])
    with open_session(source):
        pass
    templates: dict[str, Path] = {}
    projects: dict[str, Path] = {}
    others: dict[str, Path] = {}  # built, then only `fx` changed
    old_max = None
    for variant, line in VARIANTS.items():
        project = work / f"project_{variant}"
        project.mkdir()
        text = with_versioning(PROJECT, versioning).replace("MATERIALIZE", line)
        if key:
            text = text.replace("  table: raw.orders\n", "  table: raw.orders\n  key: [order_id]\n")
        (project / "bench.strata").write_text(text)
        load_project(project)
        built = work / f"built_{variant}.duckdb"
        copy(source, built)
        first = run_project(project, built)
        expected = {"stg_orders": "view" if variant == "view" else "full", "daily": "full", "rates": "full"}
        assert paths_of(first) == expected, f"first build took {paths_of(first)}"
        other = work / f"other_{variant}.duckdb"
        copy(built, other)
        execute(other, [FX_UPDATE])
        others[variant] = other
        if variant == "table":
            floor_built = work / "floor_built.duckdb"
            copy(source, floor_built)
            old_max = write_floor(floor_built, built, ("daily",), "SELECT max(updated_at) FROM raw.orders")
            execute(floor_built, [LATE_UPDATE])
            templates["floor"] = floor_built
        execute(built, [LATE_UPDATE])
        templates[variant], projects[variant] = built, project
    days = changed_days(templates["view"], old_max)
    floor_sql = floor_statements(days)
    sides = {name: Timings([], []) for name in ("view", "table", "floor")}
    staging_ms: dict[str, list[float]] = {"view": [], "table": []}
    live = {name: work / f"{name}.duckdb" for name in sides}

    def strata(variant: str) -> Callable[[], None]:
        def call() -> None:
            result = run_project(projects[variant], live[variant], only_stale=True)
            paths = paths_of(result)
            # A plain staging table is maintained row-wise (engine/builds/row_wise.py) by the days of
            # a cdc column or the blocks of a key, or built in full (no such signal, or changed
            # slices holding most of its rows).
            staging = ("view",) if variant == "view" else ("full", "partitions")
            assert paths["stg_orders"] in staging and paths["daily"] == "partitions", paths
            assert result.outcome("daily").detail["partitions"] == days
            staging_ms[variant].append(result.outcome("stg_orders").duration_ms)

        return call

    calls = [
        (strata("view"), sides["view"]),
        (strata("table"), sides["table"]),
        (lambda: execute(live["floor"], floor_sql), sides["floor"]),
    ]
    console.print(f"late updates on {len(days)} days; {repeat} interleaved repeats ...")
    for i in range(repeat):
        for name in sides:
            copy(templates[name], live[name])
        shift = i % len(calls)
        for call, into in calls[shift:] + calls[:shift]:
            timed(call, into)
        check(live["view"], "main.v_daily", True)
        check(live["table"], "main.v_daily", False)
        check(live["floor"], "main.daily", False)
    other_sides = {name: Timings([], []) for name in VARIANTS}

    def other_source(variant: str) -> Callable[[], None]:
        def call() -> None:
            paths = paths_of(run_project(projects[variant], live[variant], only_stale=True))
            assert paths["rates"] == "full" and paths["daily"] == "reused", paths
            assert paths["stg_orders"] in ("reused", "cutoff"), paths  # its rows are unchanged

        return call

    console.print(f"a change to another source only; {repeat} interleaved repeats ...")
    for i in range(repeat):
        for name in VARIANTS:
            copy(others[name], live[name])
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            timed(other_source(name), other_sides[name])
        for name in VARIANTS:
            check(live[name], "main.v_daily", name == "view")
            assert served_rows(live[name], "stg_orders") == served_rows(
                live[name], "stg_orders", served=False
            )
    return {"sides": sides, "staging_ms": staging_ms, "days": days, "other": other_sides}


def served_rows(warehouse: Path, model: str, *, served: bool = True) -> list[tuple[object, ...]]:
    """The model's rows as a multiset of row hashes: from the serving copy readers attach, or from
    the warehouse's own live view."""
    con = duckdb.connect() if served else duckdb.connect(str(warehouse), read_only=True)
    try:
        if served:
            con.execute(reader_statement_for(warehouse))
        return con.execute(
            f"SELECT hash(r), count(*) FROM main.v_{model} AS r GROUP BY 1 ORDER BY 1"
        ).fetchall()
    finally:
        con.close()


def main() -> None:
    parser = bench_arguments(__doc__)
    add_versioning_argument(parser)
    parser.add_argument("--key", action="store_true", help="declare key: [order_id] on the orders")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-bench-views-", dir=args.dir) as work:
        found = bench(args.rows, args.repeat, Path(work), args.versioning, args.key)
    sides: dict[str, Timings] = found["sides"]  # type: ignore[assignment]  # bench() returns a dict of both
    staging: dict[str, list[float]] = found["staging_ms"]  # type: ignore[assignment]  # bench() returns a dict of both
    floor = statistics.median(sides["floor"].wall)
    keyed = ", key: [order_id]" if args.key else ""
    console.print(
        f"\n{args.rows:,} orders, versioning {args.versioning}{keyed}, {args.repeat} repeats; {machine()}"
    )
    console.print(f"floor: {FLOOR_IS}")
    for name in ("view", "table", "floor"):
        wall = sides[name].wall
        ratio = statistics.median(wall) / floor if floor else float("nan")
        extra = f"; stg_orders {statistics.median(staging[name]):.0f} ms" if name in staging else ""
        console.print(f"  {name:5}: {format_best_median(wall)} s, {ratio:.2f}x floor{extra}")
    other: dict[str, Timings] = found["other"]  # type: ignore[assignment]  # bench() returns a dict of both
    console.print("after a change to another source only (best / median):")
    for name in VARIANTS:
        console.print(f"  {name:5}: {format_best_median(other[name].wall)} s")


if __name__ == "__main__":
    sys.exit(main())
