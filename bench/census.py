"""Census: what a scripted sequence of runs decided, as deterministic JSON, to diff two trees.

Run ids are content ids and snapshot ids come from build keys, so the same code on the same data
gives the same history. The census builds the shop example (plus a module of view, row-wise and
model-over-model shapes) and the events example in a temporary folder, walks them through a fixed
sequence of changes and runs, all at one fixed clock, and writes for each step the plan
(`plan_project(...).as_dict()`) before the run and the run's outcomes after it, then every entry of
`strata history --json`. Only wall-clock fields are dropped (`duration_ms`, `started_at`,
`finished_at`), and the work folder is written `$WORK`. Two trees that decide, build and record
alike give byte-identical files (about 20 s):

    PYTHONPATH=TREE python bench/census.py --out census.json

Uses only the pinned entry points `strata_dagster.engine.run.run_project`,
`strata_dagster.engine.plan.plan_project` and the `strata` command line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

import strata_dagster
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import RunResult, run_project

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOW = dt.datetime(2026, 2, 10, 12, 0, 0)
ORDERS = 200_000
EVENT_DAYS = 30
WALL_CLOCK = ("duration_ms", "started_at", "finished_at")

# Shapes the shop does not have: a view model, row-wise models over a cdc source and over a model,
# a plain model over a partitioned model, and a model rebuilt on every run.
EXTRA_MODULE = """
model paid_orders_view {
  from stg_orders
  filter status = 'paid'
  select order_id, customer_id, order_day, amount
  materialize: view
}

model large_orders {
  from orders
  filter amount > 400
  let order_day = cast(order_ts as date)
  select order_id, customer_id, order_day, updated_at, status, amount
}

model enriched_web {
  from orders_enriched
  filter channel = 'web'
  select order_id, customer_id, order_day, amount, region
}

model daily_revenue_north {
  from daily_revenue
  filter region = 'north'
  select order_day, revenue, order_count
}

model order_count_now {
  from stg_customers
  aggregate customers = count(*)
  refresh: always
}
"""

# 1% new orders, placed after every existing one and stamped after every existing update.
APPEND = """
INSERT INTO raw.orders
SELECT o.order_id + m.max_id, o.customer_id, o.order_ts + INTERVAL 30 DAY,
       m.max_updated + to_seconds(o.order_id), o.status, o.amount, o.channel, o.tags
FROM raw.orders AS o,
     (SELECT max(order_id) AS max_id, max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE o.order_id <= ?
"""
# 0.1% of the orders of 20 old days re-stamped after every existing update (late corrections):
# a quarter cancelled, the rest paid with a new amount.
LATE_UPDATE = """
UPDATE raw.orders AS o
SET updated_at = m.max_updated + to_seconds(o.order_id % 997 + 1),
    amount = o.amount + 1,
    status = CASE WHEN o.order_id % 4 = 0 THEN 'cancelled' ELSE 'paid' END
FROM (SELECT max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE CAST(o.order_ts AS DATE) BETWEEN DATE '2025-03-01' AND DATE '2025-03-20'
  AND o.order_id % 50 = 3
"""
# Rows stamped within `lateness` (10 minutes) below the watermark: the delta re-reads them.
WITHIN_LATENESS = """
INSERT INTO raw.orders
SELECT o.order_id + m.max_id, o.customer_id, o.order_ts, m.max_updated - INTERVAL 5 MINUTE,
       'paid', o.amount, o.channel, o.tags
FROM raw.orders AS o,
     (SELECT max(order_id) AS max_id, max(updated_at) AS max_updated FROM raw.orders) AS m
WHERE o.order_id <= 40
"""
CUSTOMER_CHANGE = "UPDATE raw.customers SET region = 'north' WHERE customer_id % 97 = 5"


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items() if key not in WALL_CLOCK}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _outcomes(result: RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "entry": result.entry,
        "removed": list(result.removed),
        "outcomes": [
            {
                "model": outcome.model,
                "path": outcome.path,
                "snapshot_id": outcome.snapshot_id,
                "rows": outcome.rows,
                "is_published": outcome.is_published,
                "sql": outcome.sql,
                "detail": _clean(outcome.detail),
            }
            for outcome in result.outcomes
        ],
    }


def _strata(*args: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "strata_dagster.cli.main", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return completed.stdout


def _history(project: Path, warehouse: Path) -> Any:
    return _clean(json.loads(_strata("history", str(project), "--warehouse", str(warehouse), "--json")))


class Census:
    def __init__(self, project: Path, warehouse: Path) -> None:
        self.project, self.warehouse = project, warehouse
        self.steps: list[dict[str, Any]] = []

    def step(self, label: str, **options: Any) -> None:
        """The plan of a run with `options` (none before the warehouse exists), then the run itself
        and its outcomes."""
        planned = (
            plan_project(self.project, self.warehouse, now=NOW, **options).as_dict()
            if self.warehouse.exists()
            else None
        )
        result = run_project(self.project, self.warehouse, now=NOW, **options)
        self.steps.append({"step": label, "plan": _clean(planned), "run": _outcomes(result)})

    def sql(self, statement: str, *parameters: object) -> None:
        with duckdb.connect(str(self.warehouse)) as con:
            con.execute(statement, list(parameters))


def shop(work: Path) -> dict[str, Any]:
    project = work / "shop"
    shutil.copytree(EXAMPLES / "shop", project, ignore=shutil.ignore_patterns("*.duckdb*", "__pycache__"))
    (project / "census.strata").write_text(EXTRA_MODULE)
    warehouse = project / "warehouse.duckdb"
    _strata("sample-data", str(project), "--warehouse", str(warehouse), "--rows", str(ORDERS))
    census = Census(project, warehouse)
    census.step("first build")
    census.step("nothing changed, only stale", only_stale=True)
    census.step("nothing changed, all selected")
    census.sql(APPEND, ORDERS // 100)
    census.step("1% appended orders", only_stale=True)
    census.sql(LATE_UPDATE)
    census.step("late updates on 20 old days", only_stale=True)
    census.sql(WITHIN_LATENESS)
    census.step("rows within lateness", only_stale=True)
    census.sql(CUSTOMER_CHANGE)
    census.step("customers changed", only_stale=True)
    census.step("partitions requested", models=["daily_revenue"], partitions=["2025-02-03..2025-02-05"])
    census.step("full refresh of stg_orders", models=["stg_orders"], full_refresh=True)
    census.step("after the full refresh, only stale", only_stale=True)
    return {"steps": census.steps, "history": _history(project, warehouse)}


def events(work: Path) -> dict[str, Any]:
    project = work / "events"
    shutil.copytree(EXAMPLES / "events", project, ignore=shutil.ignore_patterns("events", "*.duckdb*"))
    warehouse = project / "warehouse.duckdb"
    _strata("sample-data", str(project), "--days", str(EVENT_DAYS), "--rows", "30000")
    census = Census(project, warehouse)
    census.step("first build")
    census.step("nothing new, only stale", only_stale=True)
    _strata("sample-data", str(project), "--days", str(EVENT_DAYS + 3), "--rows", "30000")
    census.step("3 new days", only_stale=True)
    census.step("full refresh of daily_kinds", models=["daily_kinds"], full_refresh=True)
    return {"steps": census.steps, "history": _history(project, warehouse)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Where to write the census JSON.")
    parser.add_argument("--keep", type=Path, help="Work in this folder (kept) instead of a temporary one.")
    args = parser.parse_args()
    print(f"strata_dagster imported from {Path(strata_dagster.__file__).parent}", file=sys.stderr)
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="strata-census-") as temporary:
        work = args.keep or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        census = {"shop": shop(work), "events": events(work)}
    # File sources are read by absolute path: the SQL names the work folder, which is not compared.
    text = json.dumps(census, indent=1, sort_keys=True).replace(str(work.resolve()), "$WORK")
    args.out.write_text(text.replace(str(work), "$WORK") + "\n")
    print(f"census written to {args.out} in {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
