"""The acceptance project: one cdc source and a dimension; an upsert, a row-wise model with a
join, a day-partitioned aggregate and a plain aggregate; the source held in Python and written
whole to the engine after every change, and each model's full rebuild as a plain query."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from strata_dagster_tests.support.engines_support import EngineUnderTest, normalised

MODULE = """
source events {
  table: raw.events
  versioning: cdc(ts)
}

source customers {
  table: raw.customers
}

model up {
  from events
  let day = cast(ts as date)
  filter status <> 'void'
  incremental
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: ts
  lateness: '2 minutes'
  unique: [id]
}

model rw {
  from events
  join left customers on events.cust = customers.cust
  filter events.v >= 0
  select events.id, events.ts, events.v, customers.region
}

model daily {
  from up
  group day
  aggregate total = sum(v), n = count(*)
  partitioned_by: day(day)
}

model by_region {
  from rw
  group region
  aggregate n = count(*), total = sum(v)
}
"""

EVENTS = (("id", "BIGINT"), ("cust", "BIGINT"), ("status", "VARCHAR"), ("v", "INTEGER"), ("ts", "TIMESTAMP"))
CUSTOMERS = (("cust", "BIGINT"), ("region", "VARCHAR"))
MODELS = ("up", "rw", "daily", "by_region")

# Each model's full rebuild over the sources, as a plain query (DuckDB SQL; the session renders it
# for the engine): what the live view must hold after every run.
FULL = {
    "up": "SELECT id, cust, status, v, ts, cast(ts AS date) AS day FROM raw.events WHERE status <> 'void'",
    "rw": "SELECT e.id, e.ts, e.v, c.region FROM raw.events e LEFT JOIN raw.customers c ON e.cust = c.cust "
    "WHERE e.v >= 0",
    "daily": "SELECT cast(ts AS date) AS day, sum(v) AS total, count(*) AS n FROM raw.events "
    "WHERE status <> 'void' GROUP BY cast(ts AS date)",
    "by_region": "SELECT c.region, count(*) AS n, sum(e.v) AS total FROM raw.events e "
    "LEFT JOIN raw.customers c ON e.cust = c.cust WHERE e.v >= 0 GROUP BY c.region",
}

T0 = dt.datetime(2025, 1, 1)
STATUSES = ("open", "paid", "void")
REGIONS = ("north", "south", "east")


@dataclass
class Sources:
    """The source tables as the test holds them. By the cdc contract every insert and update is
    stamped above every earlier stamp; late rows are stamped back, like a writer whose transaction
    committed late (at or below the watermark: the engine must notice and fall back)."""

    events: dict[int, tuple] = field(default_factory=dict)
    customers: dict[int, str] = field(default_factory=lambda: {0: "north", 1: "south"})
    clock: int = 0
    next_id: int = 0

    def stamp(self, clock: int) -> dt.datetime:
        # Seven hours a tick: the rows spread over days (partitions) while stamps only advance.
        return T0 + dt.timedelta(hours=7 * clock)

    def tick(self, skip: int = 0) -> dt.datetime:
        self.clock += 1 + skip
        return self.stamp(self.clock)

    def insert(self, cust: int, status: str, value: int, skip: int = 0) -> None:
        self.events[self.next_id] = (self.next_id, cust, status, value, self.tick(skip))
        self.next_id += 1

    def apply(self, step: tuple) -> None:
        kind, argument = step
        if kind == "insert":
            for cust, status, value, skip in argument:
                self.insert(cust, status, value, skip)
        elif kind == "update":
            for row_id, status, value in argument:
                if row_id in self.events:
                    cust = self.events[row_id][1]
                    self.events[row_id] = (row_id, cust, status, value, self.tick())
        elif kind == "delete":
            for row_id in argument:
                self.events.pop(row_id, None)
        elif kind == "late":
            for cust, status, value, back in argument:
                stamp = self.stamp(max(self.clock - back, 0))
                self.events[self.next_id] = (self.next_id, cust, status, value, stamp)
                self.next_id += 1
        elif kind == "region":
            cust, region = argument
            self.customers[cust] = region

    def write(self, engine: EngineUnderTest) -> None:
        engine.write_table("raw.events", EVENTS, sorted(self.events.values()))
        engine.write_table("raw.customers", CUSTOMERS, sorted(self.customers.items()))


def make_project(root: Path) -> Path:
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "models.strata").write_text(MODULE)
    return project


def differences(engine: EngineUnderTest, model: str) -> tuple[Counter, Counter]:
    """(rows only live, rows only in the full rebuild), as multisets, column order aligned by name."""
    live_columns, live = engine.read(f"SELECT * FROM main.v_{model}")
    full_columns, full = engine.read(FULL[model])
    assert sorted(live_columns) == sorted(full_columns), (model, live_columns, full_columns)
    order = [full_columns.index(name) for name in live_columns]
    aligned = [tuple(row[index] for index in order) for row in full]
    live_set, full_set = normalised(live), normalised(aligned)
    return live_set - full_set, full_set - live_set
