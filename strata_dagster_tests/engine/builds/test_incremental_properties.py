"""Property: random histories of source changes; after every run the upsert equals a full rebuild,
and append / append_new equal their definitions (previous plus the window's rows / new keys), or,
after a fallback (rows written late below the window), a full rebuild; compared as row-hash
multisets."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster.state.history import HistoryReader
from strata_dagster_tests.support.engine_support import replay_history
from strata_dagster_tests.support.incremental_support import (
    FULL_AN,
    FULL_AP,
    FULL_UP,
    FULL_UP_V,
    MODULE,
    VIEW_MODULE,
    compaction_thresholds,
    make_project,
    multiset,
    with_lateness,
)
from strata_dagster_tests.support.serving_support import assert_served_as_published

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

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
# A writer committing late: rows stamped `minutes back` before the newest stamp (within or beyond
# `lateness`, at or below the watermark).
late = st.tuples(
    st.just("late"),
    st.lists(
        st.tuples(st.sampled_from(STATUSES), st.integers(-2, 5), st.integers(0, 6)), min_size=1, max_size=3
    ),
)
steps = st.lists(st.one_of(insert, update, delete, reload, late), min_size=1, max_size=7)
LATENESS_MINUTES = 2


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
        elif kind == "late":
            for status, value, back in argument:
                stamp = T0 + dt.timedelta(minutes=max(self.clock - back, 0))
                self.con.execute(
                    "INSERT INTO raw.events VALUES (?, ?, ?, ?)", [self.next_id, status, value, stamp]
                )
                self.next_id += 1
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


def live_rows(con, model: str) -> list:
    return con.execute(f"SELECT * FROM main.v_{model}").fetchall()


def watermark(con, model: str) -> dt.datetime | None:
    """The watermark of the model's live state as its next build reads it (what its next window
    starts from): an early cutoff that kept the state may have moved it from its last segment's
    (the source's newest row deleted); None for a state without rows (a reload that emptied the
    source), whose next rows are all new."""
    history = HistoryReader(con)
    head = history.snapshot(history.pointers("main")[model][-1])
    assert head is not None
    text = history.with_kept_facts(head, "main").watermark
    return None if text is None else dt.datetime.fromisoformat(text)


def expected_append(con, model: str, outcome, lateness: dt.timedelta) -> str:
    """What an append or append_new model must hold after a delta, as SQL over the previous rows
    (temp table `previous`) and the source: its definition with the window the build recorded
    (re-read rows already appended are not appended twice; append_new adds only new keys)."""
    window = outcome.detail["window"]
    before = dt.datetime.fromisoformat(window["low"])
    low, high = before - lateness, dt.datetime.fromisoformat(window["high"])
    if model == "ap":
        new = (
            f"({FULL_AP} WHERE ts > '{low}' AND ts <= '{high}') EXCEPT ALL "
            f"(SELECT * FROM previous WHERE ts > '{low}' AND ts <= '{before}')"
        )
    else:
        new = (
            f"SELECT * FROM ({FULL_AN} AND ts > '{low}' AND ts <= '{high}') w "
            "WHERE w.id NOT IN (SELECT id FROM previous)"
        )
    return f"SELECT * FROM previous UNION ALL SELECT * FROM ({new}) n"


def check_append(
    con, model: str, outcome, previous: list, lateness: dt.timedelta, is_late_below: bool
) -> None:
    full = {"ap": FULL_AP, "an": FULL_AN}[model]
    if is_late_below:
        # Rows appeared below every window: only a full build sees them, and it says why.
        assert outcome.path == "full", (model, outcome.detail)
        assert "appeared at or below the watermark" in outcome.detail["full_reason"]
    if outcome.path == "full":
        assert multiset(con, f"SELECT * FROM main.v_{model}") == multiset(con, full), model
        assert outcome.detail["full_reason"]
        return
    columns = (
        "id BIGINT, status VARCHAR, v INTEGER, ts TIMESTAMP"
        if model == "ap"
        else "id BIGINT, v INTEGER, ts TIMESTAMP"
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE previous ({columns})")
    if previous:
        con.executemany(f"INSERT INTO previous VALUES ({', '.join('?' * len(previous[0]))})", previous)
    expected = (
        "SELECT * FROM previous"
        if outcome.path in ("reused", "cutoff")
        else expected_append(con, model, outcome, lateness)
    )
    assert multiset(con, f"SELECT * FROM main.v_{model}") == multiset(con, expected), (model, outcome.path)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    history=steps,
    versioning=st.sampled_from(["cdc(ts)", "full"]),
    has_lateness=st.booleans(),
    is_eager=st.booleans(),
)
@example(
    history=[("reload", 2), ("update", [(0, "open", 0)]), ("delete", [1]), ("reload", 3), ("reload", 2)],
    versioning="cdc(ts)",
    has_lateness=False,
    is_eager=False,
)  # a reload that empties the source leaves states without a watermark (found at random)
@example(
    history=[("late", [("open", 0, 5)]), ("delete", [2]), ("late", [("open", 0, 0)])],
    versioning="cdc(ts)",
    has_lateness=True,
    is_eager=False,
)  # after a delete, a row stamped at the newest stamp: the source's count and range are those of two
# runs before, whose build key was reused (found at random)
@example(
    history=[("delete", [0]), ("delete", [3]), ("late", [("open", 1, 2)])],
    versioning="cdc(ts)",
    has_lateness=True,
    is_eager=False,
)  # the newest row deleted: the early cutoff keeps the state with the window's new end, and a late
# row just above it is in the next window (found at random)
def test_random_histories(tmp_path_factory, history, versioning, has_lateness, is_eager):
    """Both source fingerprints: the change column alone (the cdc contract) and whole rows; with
    and without `lateness`; segments compacted as usual or at every chance (`is_eager`)."""
    with compaction_thresholds(is_eager):
        _random_history(tmp_path_factory, history, versioning, has_lateness)


def _random_history(tmp_path_factory, history, versioning, has_lateness):
    lateness = dt.timedelta(minutes=LATENESS_MINUTES if has_lateness else 0)
    module = with_lateness(MODULE, f"{LATENESS_MINUTES} minutes") if has_lateness else MODULE
    project, warehouse = make_project(tmp_path_factory.mktemp("history"), module, versioning=versioning)
    con = duckdb.connect(str(warehouse))
    source = Source(con)
    source.apply(("insert", [("open", 1), ("paid", 2), ("void", 3), ("open", -1)]))
    con.close()
    run_project(project, warehouse)
    for step in history:
        con = duckdb.connect(str(warehouse))
        source.con = con
        previous = {model: live_rows(con, model) for model in ("ap", "an")}
        marks = {model: watermark(con, model) for model in ("ap", "an")}
        thresholds = {model: None if mark is None else mark - lateness for model, mark in marks.items()}
        clock = source.clock
        source.apply(step)
        con.close()
        result = run_project(project, warehouse, only_stale=True)
        con = duckdb.connect(str(warehouse))
        try:
            assert multiset(con, "SELECT * FROM main.v_up") == multiset(con, FULL_UP), (
                step,
                result.outcome("up"),
            )
            for model in ("ap", "an"):
                oldest_late = (
                    T0 + dt.timedelta(minutes=max(clock - max(back for _, _, back in step[1]), 0))
                    if step[0] == "late"
                    else None
                )
                threshold = thresholds[model]
                is_late_below = oldest_late is not None and threshold is not None and oldest_late <= threshold
                check_append(con, model, result.outcome(model), previous[model], lateness, is_late_below)
        finally:
            con.close()
        assert_served_as_published(warehouse)  # readers see exactly these incremental states


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

    def apply(con, step, clock):
        source.con = con
        source.apply(step)

    def check(con, step, result):
        assert multiset(con, "SELECT * FROM main.v_up_v") == multiset(con, FULL_UP_V), (
            step,
            result.outcome("up_v"),
        )
        assert multiset(con, "SELECT * FROM main.v_ev") == multiset(
            con, "SELECT *, v * 2 AS v2 FROM raw.events WHERE v >= -1"
        )

    replay_history(
        project, warehouse, history, apply, check, after_check=lambda: assert_served_as_published(warehouse)
    )
