"""The serving catalog refreshed incrementally (a copy of the previous catalog, only what changed
replaced) equals one written from scratch, after any sequence of runs, branch operations,
rollbacks, gc, edited views and table-stored snapshots; readers of the previous catalog keep their
whole state; a previous catalog that cannot be copied is replaced by a whole one (issue 19)."""

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.backends.duckdb import serving
from strata_dagster.backends.duckdb.snapshot_files import STORAGE_ENV
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.commands.operations import create_branch, promote, rollback
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import execute, make_module_project
from strata_dagster_tests.support.serving_support import assert_served_as_published

MODULE = """
source events {
  table: raw.events
  versioning: cdc(ts)
}

model up {
  from events
  let day = cast(ts as date)
  filter status <> 'void'
  incremental
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: ts
}

model ap {
  from events
  select id, status, v, ts
  incremental
  merge_strategy: append
  cdc_column: ts
}

model ev {
  from events
  filter v >= 0
  materialize: view
}

source every_event {
  table: raw.events
}

model evf {
  from every_event
  filter v >= 2
  materialize: view
}

model daily {
  from up
  group day
  aggregate total = sum(v), n = count(*)
  partitioned_by: day(day)
}
"""
T0 = dt.datetime(2025, 1, 1)
EVENTS = "CREATE TABLE raw.events (id BIGINT, status VARCHAR, v INTEGER, ts TIMESTAMP)"


class History:
    """The source and the operations of one random history (the clock only moves forward)."""

    def __init__(self, project: Path, warehouse: Path) -> None:
        self.project, self.warehouse = project, warehouse
        self.clock = 0
        self.next_id = 0
        self.runs: list[str] = []  # run ids on main
        self.branches: set[str] = set()

    def change(self, rows: int) -> None:
        for _ in range(rows):
            self.clock += 1
            stamp = T0 + dt.timedelta(hours=5 * self.clock)
            if self.next_id and self.clock % 3 == 0:  # an update of an earlier row
                execute(
                    self.warehouse,
                    "UPDATE raw.events SET v = v + 1, status = 'paid', ts = ? WHERE id = ?",
                    params=[stamp, self.clock % self.next_id],
                )
                continue
            execute(
                self.warehouse,
                "INSERT INTO raw.events VALUES (?, ?, ?, ?)",
                params=[self.next_id, "void" if self.next_id % 4 == 0 else "open", self.clock % 7, stamp],
            )
            self.next_id += 1

    def apply(self, step: tuple[str, int]) -> None:
        kind, argument = step
        if kind == "run":
            self.change(argument)
            result = run_project(self.project, self.warehouse)
            if result.run_id is not None:
                self.runs.append(result.run_id)
        elif kind == "run_table_storage":  # new snapshots stored as tables: exported for readers
            self.change(argument)
            os.environ[STORAGE_ENV] = "table"
            try:
                run_project(self.project, self.warehouse)
            finally:
                del os.environ[STORAGE_ENV]
        elif kind == "branch":
            name = f"b{argument}"
            if name not in self.branches:
                create_branch(self.warehouse, name)
                self.branches.add(name)
            self.change(1)
            run_project(self.project, self.warehouse, branch=name)
        elif kind == "promote" and self.branches:
            promote(self.warehouse, sorted(self.branches)[argument % len(self.branches)])
        elif kind == "rollback" and len(self.runs) > 1:
            rollback(self.warehouse, self.runs[argument % (len(self.runs) - 1)])
        elif kind == "gc":
            gc(self.warehouse, keep=1)
            self.runs.clear()  # their snapshots may be gone: a rollback to one is refused (E024)
        elif kind == "edit":  # a live view added by hand, reading the source: served as its rows
            execute(
                self.warehouse,
                f"CREATE OR REPLACE VIEW main.v_by_hand AS SELECT * FROM raw.events WHERE v > {argument}",
            )
            self.change(1)
            run_project(self.project, self.warehouse)
        elif kind == "unedit":  # the view added by hand dropped again: no longer served
            execute(self.warehouse, "DROP VIEW IF EXISTS main.v_by_hand")
            self.change(1)
            run_project(self.project, self.warehouse)


def catalog_rows(catalog: Path) -> dict[str, list]:
    """Every view of a catalog file (live views and snapshot views) with its rows as a multiset
    of row hashes (read as readers do: the files it names are relative to the warehouse's folder)."""
    con = duckdb.connect()
    try:
        con.execute("SET file_search_path = ?", [str(catalog.parent.parent)])
        con.execute("ATTACH ? AS c (READ_ONLY)", [str(catalog)])
        views = con.execute(
            "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = 'c' AND NOT internal "
            "AND schema_name <> 'strata_serving' ORDER BY 1, 2"
        ).fetchall()
        return {
            f"{schema}.{view}": sorted(
                con.execute(f'SELECT hash(r), count(*) FROM c."{schema}"."{view}" AS r GROUP BY 1').fetchall()
            )
            for schema, view in views
        }
    finally:
        con.close()


def copied_from(warehouse: Path) -> str | None:
    """The catalog the live one started from (None: written whole)."""
    with serving.open_live(warehouse) as con:
        return con.execute("SELECT copied_from FROM strata_serving.publication").fetchone()[0]


def live_catalog(warehouse: Path) -> Path:
    live = serving.live_path(warehouse)
    return live.with_name(os.readlink(live))


def written_whole(warehouse: Path, scratch: Path) -> Path:
    """The catalog a refresh writes from scratch for the warehouse's current state: the same
    refresh, for a serving folder that holds no catalog yet, by the session that published the
    latest entry (its source fingerprints are current: nothing changed the sources since)."""
    scratch.mkdir()
    con = duckdb.connect(str(warehouse))
    try:
        latest = con.execute("SELECT max(entry) FROM strata.entries").fetchone()[0]
        state = serving.refresh(con, scratch / warehouse.name, published={latest})
    finally:
        con.close()
    assert state is not None and state.is_new and state.views_kept == 0
    return state.catalog


def assert_equals_written_whole(warehouse: Path, scratch: Path) -> None:
    incremental = live_catalog(warehouse)
    whole = written_whole(warehouse, scratch)
    assert catalog_rows(incremental) == catalog_rows(whole)
    listed = json.loads(incremental.with_suffix(".json").read_text())
    assert listed == json.loads(whole.with_suffix(".json").read_text())  # same views, same files read
    assert_served_as_published(warehouse)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(1, 4)),
        st.tuples(st.just("run_table_storage"), st.integers(1, 2)),
        st.tuples(st.just("branch"), st.integers(0, 1)),
        st.tuples(st.just("promote"), st.integers(0, 1)),
        st.tuples(st.just("rollback"), st.integers(0, 5)),
        st.tuples(st.just("gc"), st.just(0)),
        st.tuples(st.just("edit"), st.integers(0, 3)),
        st.tuples(st.just("unedit"), st.just(0)),
    ),
    min_size=2,
    max_size=5,
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps)
def test_an_incrementally_refreshed_catalog_equals_one_written_whole(tmp_path_factory, history):
    root = tmp_path_factory.mktemp("history")
    project, warehouse = make_module_project(root, "m.strata", MODULE, EVENTS)
    replay = History(project, warehouse)
    replay.apply(("run", 3))
    for index, step in enumerate(history):
        replay.apply(step)
        assert_equals_written_whole(warehouse, root / f"whole-{index}")


def test_a_reader_of_the_previous_catalog_keeps_its_whole_state(tmp_path):
    project, warehouse = make_module_project(tmp_path, "m.strata", MODULE, EVENTS)
    replay = History(project, warehouse)
    replay.apply(("run", 4))
    previous = live_catalog(warehouse)
    before_bytes = hashlib.sha256(previous.read_bytes()).hexdigest()
    before = catalog_rows(previous)
    reader = duckdb.connect()
    reader.execute(serving.reader_statement(warehouse))
    seen = {name: reader.execute(f"SELECT count(*) FROM {name}").fetchone() for name in before}
    replay.apply(("run", 3))
    replay.apply(("branch", 0))
    assert copied_from(warehouse) is not None  # the new catalogs were copied, not written whole
    assert live_catalog(warehouse) != previous
    assert hashlib.sha256(previous.read_bytes()).hexdigest() == before_bytes  # never modified
    assert {name: reader.execute(f"SELECT count(*) FROM {name}").fetchone() for name in before} == seen
    assert catalog_rows(previous) == before
    now = {name: rows for name, rows in catalog_rows(live_catalog(warehouse)).items() if name in before}
    assert now != before  # the new catalog serves the new rows
    assert_served_as_published(warehouse)


def test_a_previous_catalog_that_cannot_be_copied_is_replaced_by_a_whole_one(tmp_path):
    project, warehouse = make_module_project(tmp_path, "m.strata", MODULE, EVENTS)
    replay = History(project, warehouse)
    replay.apply(("run", 4))
    # An older format: a manifest that lists files only (as catalogs before this change).
    manifest = live_catalog(warehouse).with_suffix(".json")
    listed = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({"files": listed["files"], "snapshot_files": listed["snapshot_files"]}))
    replay.apply(("run", 2))
    assert copied_from(warehouse) is None
    assert_equals_written_whole(warehouse, tmp_path / "whole-1")
    # The live catalog's file is gone (removed by hand): the next one is written whole too.
    live_catalog(warehouse).unlink()
    replay.apply(("run", 2))
    assert copied_from(warehouse) is None
    assert_equals_written_whole(warehouse, tmp_path / "whole-2")
    # And from there on, copied again.
    replay.apply(("run", 2))
    assert copied_from(warehouse) is not None
    assert_equals_written_whole(warehouse, tmp_path / "whole-3")
