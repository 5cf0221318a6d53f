"""Property: random histories of source changes; after every run the upsert equals a full rebuild,
and append / append_new equal their definitions (previous plus the window's rows / new keys),
compared as row-hash multisets."""

import datetime as dt

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster_tests.incremental_support import (
    FULL_UP,
    FULL_UP_V,
    VIEW_MODULE,
    WINDOW_AN,
    WINDOW_AP,
    make_project,
    multiset,
)

T0 = dt.datetime(2025, 1, 1)
STATUSES = ["open", "paid", "void"]

ids = st.integers(min_value=0, max_value=30)
insert = st.tuples(
    st.just("insert"),
    st.lists(st.tuples(st.sampled_from(STATUSES), st.integers(-2, 5)), min_size=1, max_size=5),
)
update = st.tuples(
    st.just("update"),
    st.lists(st.tuples(ids, st.sampled_from(STATUSES), st.integers(-2, 5)), min_size=1, max_size=4),
)
delete = st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=3))
reload = st.tuples(st.just("reload"), st.integers(min_value=2, max_value=4))
steps = st.lists(st.one_of(insert, update, delete, reload), min_size=1, max_size=7)


class Source:
    """The source table and a clock that only moves forward (the cdc contract)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.clock = 0
        self.next_id = 0

    def tick(self) -> dt.datetime:
        self.clock += 1
        return T0 + dt.timedelta(minutes=self.clock)

    def apply(self, step) -> None:
        kind, argument = step
        if kind == "insert":
            for status, value in argument:
                self.con.execute(
                    "INSERT INTO raw.events VALUES (?, ?, ?, ?)", [self.next_id, status, value, self.tick()]
                )
                self.next_id += 1
        elif kind == "update":
            for row_id, status, value in argument:
                self.con.execute(
                    "UPDATE raw.events SET status = ?, v = ?, ts = ? WHERE id = ?",
                    [status, value, self.tick(), row_id],
                )
        elif kind == "delete":
            self.con.execute("DELETE FROM raw.events WHERE list_contains(?, id)", [argument])
        elif kind == "reload":
            # The table is replaced and reloaded: some rows are gone, the rest re-stamped.
            self.con.execute(
                "CREATE OR REPLACE TABLE raw.events AS SELECT id, status, v, ? + to_microseconds(id) AS ts "
                "FROM raw.events WHERE id % ? <> 0",
                [self.tick(), argument],
            )
            self.clock += 1


def high(con) -> dt.datetime | None:
    return con.execute("SELECT max(ts) FROM raw.events").fetchone()[0]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(ts)", "full"]))
def test_random_histories(tmp_path_factory, history, versioning):
    """Both source fingerprints: the change column alone (the cdc contract) and whole rows."""
    project, warehouse = make_project(tmp_path_factory.mktemp("history"), versioning=versioning)
    con = duckdb.connect(str(warehouse))
    source = Source(con)
    source.apply(("insert", [("open", 1), ("paid", 2), ("void", 3), ("open", -1)]))
    con.close()
    run_project(project, warehouse)
    for step in history:
        con = duckdb.connect(str(warehouse))
        source.con = con
        previous_ap = con.execute("SELECT * FROM main.v_ap").fetchall()
        previous_an = con.execute("SELECT * FROM main.v_an").fetchall()
        low = high(con)
        source.apply(step)
        new_high = high(con)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        con = duckdb.connect(str(warehouse))
        try:
            assert multiset(con, "SELECT * FROM main.v_up") == multiset(con, FULL_UP), (
                step,
                result.outcome("up"),
            )
            if result.outcome("ap").path == "full":
                continue  # only after a fallback, whose reason is recorded
            con.execute("CREATE TEMP TABLE previous_ap (id BIGINT, status VARCHAR, v INTEGER, ts TIMESTAMP)")
            if previous_ap:
                con.executemany("INSERT INTO previous_ap VALUES (?, ?, ?, ?)", previous_ap)
            con.execute("CREATE TEMP TABLE previous_an (id BIGINT, v INTEGER, ts TIMESTAMP)")
            if previous_an:
                con.executemany("INSERT INTO previous_an VALUES (?, ?, ?)", previous_an)
            window = [low, new_high]
            expected_ap = multiset(con, f"SELECT * FROM previous_ap UNION ALL {WINDOW_AP}", window)
            assert multiset(con, "SELECT * FROM main.v_ap") == expected_ap, step
            expected_an = multiset(
                con,
                f"SELECT * FROM previous_an UNION ALL SELECT * FROM ({WINDOW_AN}) w WHERE w.id NOT IN (SELECT id FROM previous_an)",
                window,
            )
            assert multiset(con, "SELECT * FROM main.v_an") == expected_an, step
        finally:
            con.close()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(ts)", "full"]))
def test_random_histories_through_a_view_model(tmp_path_factory, history, versioning):
    """An upsert model reading its source through a `materialize: view` model equals a full rebuild
    after every run, deletes and reloads included."""
    project, warehouse = make_project(tmp_path_factory.mktemp("view_history"), VIEW_MODULE, versioning)
    con = duckdb.connect(str(warehouse))
    source = Source(con)
    source.apply(("insert", [("open", 1), ("paid", 2), ("void", 3), ("open", -2)]))
    con.close()
    run_project(project, warehouse)
    for step in history:
        con = duckdb.connect(str(warehouse))
        source.con = con
        source.apply(step)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        con = duckdb.connect(str(warehouse))
        try:
            assert multiset(con, "SELECT * FROM main.v_up_v") == multiset(con, FULL_UP_V), (
                step,
                result.outcome("up_v"),
            )
            assert multiset(con, "SELECT * FROM main.v_ev") == multiset(
                con, "SELECT *, v * 2 AS v2 FROM raw.events WHERE v >= -1"
            )
        finally:
            con.close()
