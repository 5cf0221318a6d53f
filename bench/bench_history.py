"""Change-feed benchmark: an incremental upsert and an incremental history model over a change
feed, each against a hand-written DuckDB MERGE floor that applies the same window.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_history.py [--rows 10000000] [--repeat 3] [--profile]

The feed holds one insert event per key (`rows` keys); the window adds 0.1% of `rows` events
(updates of existing keys, one in ten a delete). Each repeat starts from a copy of the built
warehouse with the window written: strata's `run --only-stale` of the one model, against the
floor's statements on its own copy (a MERGE of the window's latest event per key into the upsert's
table; for the history, a MERGE closing the current versions of the window's keys and an INSERT
of the window's versions). Both sides are timed around connection open and close, interleaved
(the side that goes first alternates); the floor's statements are also timed alone, without
its connection's open and closing checkpoint. After every repeat the model's live view is compared
with the floor's table and with the recomputation from the whole feed (row-hash multisets): a
wrong delta fails the bench. `--profile` runs each model once more with every statement timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
from bench_engine import copy, cpu_seconds

import strata_dagster
from strata_dagster.backends.sql import runner
from strata_dagster.engine.run import run_project
from strata_dagster.sql.render import render

SOURCE = """
source customer_changes {
  table: raw.customer_changes
  versioning: feed(lsn)
  feed_keys: [id]
  deletes: flag(is_deleted)
}
"""
MODELS = {
    "customers": """
model customers {
  from customer_changes
  select id, name, region, lsn
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: lsn
}
""",
    "customer_history": """
model customer_history {
  from customer_changes
  select id, name, region, lsn, valid_from, valid_to, is_current
  merge_strategy: history
  merge_keys: [id]
  cdc_column: lsn
}
""",
}
# The recomputation from the whole feed each model must equal (its latest event; its versions).
EVENTS = "SELECT * FROM raw.customer_changes"
FULL = {
    "customers": (
        "SELECT id, name, region, lsn FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY lsn DESC, "
        f"hash(e) DESC) AS rank FROM ({EVENTS}) e) WHERE rank = 1 AND NOT coalesce(is_deleted, false)"
    ),
    "customer_history": (
        "SELECT id, name, region, lsn, lsn AS valid_from, valid_to, valid_to IS NULL AS is_current FROM ("
        "SELECT *, lead(lsn) OVER (PARTITION BY id ORDER BY lsn) AS valid_to FROM (SELECT *, row_number() "
        f"OVER (PARTITION BY id, lsn ORDER BY hash(e) DESC) AS rank FROM ({EVENTS}) e) WHERE rank = 1) "
        "WHERE NOT coalesce(is_deleted, false)"
    ),
}


def window_events(low: int) -> str:
    return f"SELECT * FROM raw.customer_changes WHERE lsn > {low}"


def floor_statements(model: str, low: int) -> list[str]:
    """The least work that applies the window (low, max] to the floor's copy of the model, trusting
    that the window's events come after every earlier one (as they do here)."""
    window = window_events(low)
    if model == "customers":
        latest = (
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY lsn DESC) AS rank "
            f"FROM ({window})) WHERE rank = 1"
        )
        return [
            f"MERGE INTO floor_customers f USING ({latest}) w ON f.id = w.id "
            "WHEN MATCHED AND w.is_deleted THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET name = w.name, region = w.region, lsn = w.lsn "
            "WHEN NOT MATCHED AND NOT w.is_deleted THEN INSERT VALUES (w.id, w.name, w.region, w.lsn)"
        ]
    first = f"SELECT id, min(lsn) AS first_lsn FROM ({window}) GROUP BY id"
    versions = (
        "SELECT id, name, region, lsn, lsn, valid_to, valid_to IS NULL FROM (SELECT *, lead(lsn) OVER "
        f"(PARTITION BY id ORDER BY lsn) AS valid_to FROM ({window})) WHERE NOT is_deleted"
    )
    return [
        "BEGIN",
        f"MERGE INTO floor_customer_history f USING ({first}) w ON f.id = w.id AND f.is_current "
        "WHEN MATCHED THEN UPDATE SET valid_to = w.first_lsn, is_current = false",
        f"INSERT INTO floor_customer_history {versions}",
        "COMMIT",
    ]


def prepare(rows: int, work: Path, model: str) -> tuple[Path, Path, int]:
    """The project and a warehouse built in full over `rows` insert events, with the floor's copy of
    the model, then the window's events written; and the window's low."""
    project = work / f"project_{model}"
    project.mkdir(parents=True, exist_ok=True)
    (project / "feed.strata").write_text(SOURCE + MODELS[model])
    built = work / f"built_{model}.duckdb"
    con = duckdb.connect(str(built))
    con.execute("CREATE SCHEMA raw")
    con.execute(
        "CREATE TABLE raw.customer_changes AS SELECT i AS id, 'name ' || i AS name, "
        "['eu', 'us', 'apac'][1 + i % 3] AS region, i AS lsn, false AS is_deleted FROM range(1, ? + 1) t(i)",
        [rows],
    )
    con.close()
    run_project(project, built)
    changes = max(1, rows // 1000)
    con = duckdb.connect(str(built))
    con.execute(f"CREATE TABLE floor_{model} AS SELECT * FROM main.v_{model}")
    # Keys spread over the whole key range; one change in ten deletes its key.
    con.execute(
        "INSERT INTO raw.customer_changes SELECT 1 + (j * 7919) % ? AS id, 'renamed ' || j, 'eu', ? + j, "
        "j % 10 = 0 FROM range(1, ? + 1) t(j)",
        [rows, rows, changes],
    )
    con.close()
    return project, built, rows


def check(warehouse: Path, model: str) -> None:
    con = duckdb.connect(str(warehouse))
    try:
        multiset = "SELECT hash(r), count(*) FROM ({}) r GROUP BY 1 EXCEPT ALL SELECT hash(r), count(*) FROM ({}) r GROUP BY 1"
        for left, right in (
            (f"SELECT * FROM main.v_{model}", f"SELECT * FROM floor_{model}"),
            (f"SELECT * FROM main.v_{model}", FULL[model]),
        ):
            for one, other in ((left, right), (right, left)):
                extra = con.execute(multiset.format(one, other)).fetchall()
                assert not extra, f"{model}: {len(extra)} row groups differ ({one[:60]} / {other[:60]})"
    finally:
        con.close()


def timed(call: Callable[[], object]) -> tuple[float, float]:
    cpu, started = cpu_seconds(), time.perf_counter()
    call()
    return time.perf_counter() - started, cpu_seconds() - cpu


def strata_side(project: Path, warehouse: Path, model: str) -> Callable[[], object]:
    def run() -> None:
        outcome = run_project(project, warehouse, only_stale=True).outcome(model)
        assert outcome.path == "delta", outcome.detail

    return run


def floor_side(warehouse: Path, statements: list[str], alone: list[float]) -> Callable[[], object]:
    """The floor's statements, timed as a whole (open and close included) and alone (into `alone`)."""

    def run() -> None:
        con = duckdb.connect(str(warehouse))
        try:
            started = time.perf_counter()
            for statement in statements:
                con.execute(statement)
            alone.append(time.perf_counter() - started)
        finally:
            con.close()

    return run


def profile(project: Path, built: Path, model: str, work: Path, shown: int) -> None:
    """Run the delta once with every statement through the engine's runner timed."""
    timings: list[tuple[float, str]] = []
    original = runner.run

    def run(con, statement, params=None, **options):  # type: ignore[no-untyped-def]  # the runner's signature
        text = render(statement)
        started = time.perf_counter()
        try:
            return original(con, statement, params, **options)
        finally:
            timings.append((time.perf_counter() - started, text))

    patched = [module for module in list(sys.modules.values()) if getattr(module, "run", None) is original]
    for module in patched:
        module.run = run  # type: ignore[attr-defined]  # each importer's name for the runner
    try:
        engine = work / f"profile_{model}.duckdb"
        copy(built, engine)
        wall, _ = timed(strata_side(project, engine, model))
    finally:
        for module in patched:
            module.run = original  # type: ignore[attr-defined]  # each importer's name for the runner, restored
    total = sum(seconds for seconds, _ in timings)
    print(f"\n{model}: run {wall:.3f} s, {len(timings)} statements {total:.3f} s; slowest:")
    for seconds, text in sorted(timings, reverse=True)[:shown]:
        print(f"  {seconds:.3f} s  {' '.join(text.split())[:220]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--statements", type=int, default=8)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    print(f"strata {strata_dagster.__file__}; {args.rows:,} keys, {max(1, args.rows // 1000):,} changes")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as directory:
        work = Path(directory)
        for model in args.models:
            started = time.perf_counter()
            project, built, low = prepare(args.rows, work, model)
            print(
                f"{model}: prepared in {time.perf_counter() - started:.1f} s (load {os.getloadavg()[0]:.1f})"
            )
            sides: dict[str, list[tuple[float, float]]] = {"strata": [], "floor": []}
            alone: list[float] = []
            for repeat in range(args.repeat):
                engine, floor = work / "engine.duckdb", work / "floor.duckdb"
                copy(built, engine)
                copy(built, floor)
                order = ["strata", "floor"] if repeat % 2 == 0 else ["floor", "strata"]
                calls = {
                    "strata": strata_side(project, engine, model),
                    "floor": floor_side(floor, floor_statements(model, low), alone),
                }
                for side in order:
                    sides[side].append(timed(calls[side]))
                # The floor's table lives in its own copy: bring it beside the engine's view.
                con = duckdb.connect(str(engine))
                con.execute(f"ATTACH '{floor}' AS floor_side (READ_ONLY)")
                con.execute(
                    f"CREATE OR REPLACE TABLE floor_{model} AS SELECT * FROM floor_side.floor_{model}"
                )
                con.close()
                check(engine, model)
            best = {side: min(wall for wall, _ in times) for side, times in sides.items()}
            best_cpu = {side: min(cpu for _, cpu in times) for side, times in sides.items()}
            median = {side: statistics.median(wall for wall, _ in times) for side, times in sides.items()}
            print(
                f"{model}: strata {best['strata']:.3f} s (median {median['strata']:.3f}, cpu {best_cpu['strata']:.3f}); "
                f"floor {best['floor']:.3f} s (median {median['floor']:.3f}, cpu {best_cpu['floor']:.3f}); "
                f"ratio {best['strata'] / best['floor']:.2f} (cpu {best_cpu['strata'] / best_cpu['floor']:.2f}); "
                f"floor statements alone {min(alone):.3f} s (ratio {best['strata'] / min(alone):.1f}); "
                f"load {os.getloadavg()[0]:.1f}"
            )
            if args.profile:
                profile(project, built, model, work, args.statements)


if __name__ == "__main__":
    main()
