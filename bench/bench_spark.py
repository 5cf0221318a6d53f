"""Spark benchmark (issue 15 item 7): strata on a local Spark against hand-written Spark SQL doing
the minimum, in one process, on the same data, interleaved.

    .venv/bin/python bench/bench_spark.py [--rows 5000000] [--repeat 3]

Scenarios, each from the state the previous one left (as in bench_incremental): a full build, a
no-change run, a 1% append (new orders stamped after every row), and 0.1% late updates (every
1000th order re-stamped with a new amount and status, spread over the whole table). The project is
bench_incremental's: an upsert with a filter and a derived column, and an append model.

Floors, per scenario, timed in the same process on the same Spark:
- full build: the two models' queries as CREATE TABLE ... USING parquet AS (no fingerprint, pins,
  content hash or history);
- no-change: ONE fingerprint query of the source (its row count and change-column range, what a
  `cdc(updated_at)` source's identity is): the decision cannot be cheaper than reading it once;
- append / updates: the least work that leaves both results correct on immutable Parquet tables
  (no MERGE, no DELETE): INSERT INTO the append table of the window's rows; for the upsert, the
  window's changed keys and rows written as two new tables and the live view repointed to the
  old rows whose keys did not change plus the new rows (what strata's segments do, with none of
  its checks).
Every strata result is compared with the floor's (row count and a hash sum over the rows) before
its time counts. Targets: no-change within 2x of one fingerprint query; append and updates within
2x their floors.

The append and updates are also timed against a floor that proves what strata proves, printed as
their own rows ("... proving"): the same least work, plus, before the view is repointed, the
content figures a state's fingerprint needs (the replaced rows' count and hash sums, one scan of
the state by the window's keys, skipped when every new key lies beyond the state's greatest key;
the new rows' figures) and the proof that no kept row left the source unseen (docs/architecture.md,
R5: the model's rows outside the window whose keys the window does not replace, counted
and hashed by key and change column in one scan under a broadcast anti-join, must be the previous
state's less the replaced rows). Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strata_dagster.backends.choice import backend_choice, using_backend
from strata_dagster.backends.spark.connect import local_session
from strata_dagster.engine.run import run_project

console = Console()
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
}

model orders_append {
  from orders
  select order_id, status, updated_at
  incremental
  merge_strategy: append
  cdc_column: updated_at
}
"""
TARGET = 2.0
NO_CHANGE_SAMPLES = 5
UPSERT_QUERY = (
    "SELECT order_id, customer_id, CAST(order_ts AS DATE) AS order_day, status, amount, updated_at "
    "FROM raw.orders WHERE status <> 'cancelled'"
)
APPEND_QUERY = "SELECT order_id, status, updated_at FROM raw.orders"
FINGERPRINT = "SELECT count(*), min(updated_at), max(updated_at) FROM raw.orders"


def generate(spark, rows: int) -> None:
    """`rows` orders over a year, stamped in order, a tenth cancelled (deterministic)."""
    spark.sql("CREATE DATABASE IF NOT EXISTS raw")
    spark.sql("DROP TABLE IF EXISTS raw.orders")
    spark.sql(
        "CREATE TABLE raw.orders USING parquet AS SELECT id + 1 AS order_id, id % 5000 AS customer_id, "
        "TIMESTAMP_NTZ'2025-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id * 31536000.0 / "
        f"{rows}) AS order_ts, TIMESTAMP_NTZ'2025-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, "
        f"id * 31536000.0 / {rows} + 60) AS updated_at, CASE WHEN id % 10 = 0 THEN 'cancelled' "
        "WHEN id % 3 = 0 THEN 'shipped' ELSE 'paid' END AS status, "
        f"CAST((id % 9973) / 7.0 AS DECIMAL(12, 2)) AS amount FROM range({rows})"
    )


def replace_orders(spark, select: str) -> None:
    """raw.orders becomes `select` (over the old raw.orders); untimed."""
    spark.sql("DROP TABLE IF EXISTS raw.orders_next")
    spark.sql(f"CREATE TABLE raw.orders_next USING parquet AS {select}")
    spark.sql("DROP TABLE raw.orders")
    spark.sql("ALTER TABLE raw.orders_next RENAME TO orders")


def append(spark, rows: int) -> None:
    replace_orders(
        spark,
        "SELECT * FROM raw.orders UNION ALL SELECT o.order_id + m.max_id, o.customer_id, "
        "o.order_ts + INTERVAL 365 DAYS, m.max_updated + make_interval(0, 0, 0, 0, 0, 0, o.order_id), "
        "o.status, o.amount FROM raw.orders o CROSS JOIN (SELECT max(order_id) AS max_id, "
        f"max(updated_at) AS max_updated FROM raw.orders) m WHERE o.order_id <= {rows // 100}",
    )


def update(spark) -> None:
    replace_orders(
        spark,
        "SELECT o.order_id, o.customer_id, o.order_ts, CASE WHEN o.order_id % 1000 = 7 THEN "
        "m.max_updated + make_interval(0, 0, 0, 0, 0, 0, o.order_id DIV 1000 + 1) ELSE o.updated_at END AS updated_at, "
        "CASE WHEN o.order_id % 1000 <> 7 THEN o.status WHEN (o.order_id DIV 1000) % 4 = 0 THEN 'cancelled' "
        "WHEN o.status = 'cancelled' THEN 'paid' ELSE 'returned' END AS status, CASE WHEN o.order_id % 1000 = 7 "
        "THEN CAST(o.amount + 1 AS DECIMAL(12, 2)) ELSE o.amount END AS amount FROM raw.orders o CROSS JOIN (SELECT max(updated_at) AS "
        "max_updated FROM raw.orders) m",
    )


ROW_HASH = "xxhash64(order_id, customer_id, order_day, status, amount, updated_at)"
KEY_HASH = "xxhash64(order_id, updated_at)"
FIGURES = (
    f"count(*), coalesce(sum(CAST({ROW_HASH} AS DECIMAL(38, 0))), 0), "
    f"coalesce(sum(CAST({KEY_HASH} AS DECIMAL(38, 0))), 0)"
)


class Floor:
    """Plain Parquet tables of both results, kept up to date by the least work; `proof_seconds`,
    what proving the upsert's state as strata does took on top of the last delta."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.generation = 0
        self.watermark = ""
        self.proof_seconds = 0.0
        self.state: tuple[int, int, int] = (0, 0, 0)  # the upsert's count, row-hash and key-hash sums
        self.greatest_key = 0

    def start_figures(self) -> None:
        """The full build's state figures (untimed: the full-build floor keeps none)."""
        self.state = self._figures("floor.v_upsert")
        self.greatest_key = int(self.spark.sql("SELECT max(order_id) FROM floor.v_upsert").first()[0])

    def full(self) -> None:
        self.spark.sql("CREATE DATABASE IF NOT EXISTS floor")
        for name in [row.tableName for row in self.spark.sql("SHOW TABLES IN floor").collect()]:
            self.spark.sql(f"DROP TABLE IF EXISTS floor.{name}")
        self.spark.sql("DROP VIEW IF EXISTS floor.v_upsert")
        self.spark.sql(f"CREATE TABLE floor.upsert_0 USING parquet AS {UPSERT_QUERY}")
        self.spark.sql(f"CREATE TABLE floor.append USING parquet AS {APPEND_QUERY}")
        self.spark.sql("CREATE VIEW floor.v_upsert AS SELECT * FROM floor.upsert_0")
        self.layers = ["floor.upsert_0"]
        self.keys: list[str] = []
        self.generation = 0
        self._mark()

    def _mark(self) -> None:
        self.watermark = str(
            self.spark.sql("SELECT CAST(max(updated_at) AS STRING) FROM raw.orders").first()[0]
        )

    def delta(self) -> None:
        window = f"updated_at > TIMESTAMP_NTZ'{self.watermark}'"
        self.generation += 1
        keys, rows = f"floor.keys_{self.generation}", f"floor.upsert_{self.generation}"
        self.spark.sql(f"INSERT INTO floor.append {APPEND_QUERY} WHERE {window}")
        self.spark.sql(f"CREATE TABLE {keys} USING parquet AS SELECT order_id FROM raw.orders WHERE {window}")
        self.spark.sql(f"CREATE TABLE {rows} USING parquet AS {UPSERT_QUERY} AND {window}")
        started = time.perf_counter()
        self._prove(window, keys, rows)
        self.proof_seconds = time.perf_counter() - started
        self.keys.append(keys)
        self.layers.append(rows)
        parts = []
        for index, layer in enumerate(self.layers):
            later = self.keys[index:]
            condition = " AND ".join(f"order_id NOT IN (SELECT order_id FROM {key})" for key in later)
            parts.append(f"SELECT * FROM {layer}" + (f" WHERE {condition}" if condition else ""))
        self.spark.sql("ALTER VIEW floor.v_upsert AS " + " UNION ALL ".join(parts))
        self._mark()

    def _figures(self, relation: str, where: str = "") -> tuple[int, int, int]:
        row = self.spark.sql(
            f"SELECT {FIGURES} FROM {relation}" + (f" WHERE {where}" if where else "")
        ).first()
        return int(row[0]), int(row[1]), int(row[2])

    def _prove(self, window: str, keys: str, rows: str) -> None:
        """The upsert's new state figures, and the proof that no kept row left the source unseen."""
        least_new = self.spark.sql(f"SELECT min(order_id), max(order_id) FROM {keys}").first()
        if least_new[0] is not None and int(least_new[0]) > self.greatest_key:
            replaced = (0, 0, 0)  # every key is new: nothing of the state is replaced
        else:
            replaced = self._figures("floor.v_upsert", f"order_id IN (SELECT order_id FROM {keys})")
        kept = self.spark.sql(
            f"SELECT count(*), coalesce(sum(CAST({KEY_HASH} AS DECIMAL(38, 0))), 0) FROM ({UPSERT_QUERY} "
            f"AND NOT ({window})) o LEFT ANTI JOIN {keys} k ON o.order_id <=> k.order_id"
        ).first()
        if (int(kept[0]), int(kept[1])) != (self.state[0] - replaced[0], self.state[2] - replaced[2]):
            raise SystemExit("the proving floor: a kept row left the source unseen")
        added = self._figures(rows)
        self.state = tuple(
            before - out + new for before, out, new in zip(self.state, replaced, added, strict=True)
        )  # type: ignore[assignment]  # the same three figures
        if least_new[1] is not None:
            self.greatest_key = max(self.greatest_key, int(least_new[1]))


def figures(spark, relation: str) -> tuple[int, int]:
    row = spark.sql(
        "SELECT count(*), coalesce(sum(CAST(h AS DECIMAL(38, 0))), 0) FROM "
        f"(SELECT xxhash64(to_json(struct(*))) AS h FROM {relation})"
    ).first()
    return int(row[0]), int(row[1])


def check(spark, scenario: str) -> None:
    for strata, floor in (
        ("main.v_orders_upsert", "floor.v_upsert"),
        ("main.v_orders_append", "floor.append"),
    ):
        mine, theirs = figures(spark, strata), figures(spark, floor)
        if mine != theirs:
            raise SystemExit(f"{scenario}: {strata} {mine} differs from the floor's {floor} {theirs}")


def side_by_side(
    spark,
    results: dict[str, list[tuple[float, float]]],
    scenario: str,
    mine: Callable[[], object],
    theirs: Callable[[], object],
    strata_first: bool,
) -> tuple[float, float]:
    """Time strata and the floor on the same change (in the order given), then compare their rows;
    returns strata's and the floor's seconds."""
    order = [("strata", mine), ("floor", theirs)] if strata_first else [("floor", theirs), ("strata", mine)]
    seconds = {side: timed(call) for side, call in order}
    check(spark, scenario)
    results.setdefault(scenario, []).append((seconds["strata"], seconds["floor"]))
    return seconds["strata"], seconds["floor"]


def delta_side_by_side(spark, results, scenario: str, mine, floor: Floor, strata_first: bool) -> None:
    """A delta against the floor, and against the floor plus its proof (the floor's proof is timed
    inside its delta and taken out of the plain floor's time)."""
    strata, with_proof = side_by_side(spark, results, scenario, mine, floor.delta, strata_first)
    results[scenario][-1] = (strata, with_proof - floor.proof_seconds)
    results.setdefault(f"{scenario}, proving", []).append((strata, with_proof))


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strata-bench-spark-"))
    project = work / "project"
    project.mkdir()
    (project / "models.strata").write_text(PROJECT)
    warehouse = work / "warehouse"
    spark = local_session(warehouse)
    spark.sparkContext.setLogLevel("OFF")
    console.print(f"bench_spark: {arguments.rows:,} orders, local[2], load {os.getloadavg()[0]:.1f}")
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        with using_backend(backend_choice("spark")):
            for repeat in range(arguments.repeat):
                for database in ("main", "strata", "strata_snapshots", "floor"):
                    spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
                generate(spark, arguments.rows)
                floor = Floor(spark)
                # The side that goes first alternates between repeats (JVM warm-up, caches).
                strata_first = repeat % 2 == 0
                stale = lambda: run_project(project, warehouse, only_stale=True)  # noqa: E731
                side_by_side(
                    spark,
                    results,
                    "full build",
                    lambda: run_project(project, warehouse),
                    floor.full,
                    strata_first,
                )
                floor.start_figures()
                fingerprint = lambda: spark.sql(FINGERPRINT).collect()  # noqa: E731
                for sample in range(NO_CHANGE_SAMPLES):  # cheap, and the noisiest figure
                    side_by_side(
                        spark, results, "no-change run", stale, fingerprint, strata_first == (sample % 2 == 0)
                    )
                append(spark, arguments.rows)
                delta_side_by_side(spark, results, "1% append", stale, floor, strata_first)
                update(spark)
                delta_side_by_side(spark, results, "0.1% late updates", stale, floor, strata_first)
                console.print(f"  repeat {repeat + 1}: load {os.getloadavg()[0]:.1f}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results)


def report(results: dict[str, list[tuple[float, float]]]) -> None:
    table = Table("scenario", "strata s (median)", "floor s (median)", "ratio (median of repeats)", "target")
    for scenario, pairs in results.items():
        ratios = [mine / theirs for mine, theirs in pairs]
        target = "" if scenario == "full build" else f"<= {TARGET:.0f}x"
        table.add_row(
            scenario,
            f"{statistics.median(mine for mine, _ in pairs):.2f}",
            f"{statistics.median(theirs for _, theirs in pairs):.2f}",
            f"{statistics.median(ratios):.2f}x",
            target,
        )
    console.print(table)


if __name__ == "__main__":
    main()
