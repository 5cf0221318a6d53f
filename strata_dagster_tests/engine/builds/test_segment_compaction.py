"""When a delta build compacts its state's segments, and how (engine.builds.segment_compaction): by what
the segments cost, the live rows equal to a full rebuild after every build."""

import datetime as dt

import duckdb
import pytest

from strata_dagster.engine.builds import segment_compaction
from strata_dagster.engine.run import run_project
from strata_dagster.sql.render import render
from strata_dagster.sql.segments import Segment, composite_query
from strata_dagster_tests.support.engine_support import sql
from strata_dagster_tests.support.incremental_support import FULL_UP, make_project, multiset

T0 = dt.datetime(2025, 1, 1)


@pytest.fixture
def events(tmp_path):
    project, warehouse = make_project(tmp_path)
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT range, 'open', range % 7, ? + to_hours(range) FROM range(100)",
        [T0],
    )
    run_project(project, warehouse)
    return project, warehouse


def _equal_to_full(warehouse):
    con = duckdb.connect(str(warehouse))
    try:
        return multiset(con, "SELECT * FROM main.v_up") == multiset(con, FULL_UP)
    finally:
        con.close()


def _update(warehouse, ids, hour):
    sql(
        warehouse,
        f"UPDATE raw.events SET v = v + 1, ts = ? + to_hours(?) WHERE id IN ({', '.join(map(str, ids))})",
        [T0, hour],
    )


def _segments(warehouse, model="up"):
    (row,) = sql(
        warehouse,
        "SELECT snapshot_ids FROM strata.publications WHERE model = ? ORDER BY entry DESC LIMIT 1",
        [model],
    )
    return list(row[0])


def test_a_delta_replacing_every_live_row_is_the_new_base_without_a_copy(events):
    project, warehouse = events
    _update(warehouse, [1], 1000)
    run_project(project, warehouse, only_stale=True)
    _update(warehouse, range(100), 1001)
    up = run_project(project, warehouse, only_stale=True).outcome("up")
    assert up.detail["compaction"] == "the new segment replaces every live row"
    assert up.table_name == up.detail["compacted_delta"]  # the delta's segment itself: nothing copied
    assert _segments(warehouse) == [up.snapshot_id]
    assert _equal_to_full(warehouse)


def test_dead_rows_past_half_the_live_rows_compact_every_segment(events, monkeypatch):
    project, warehouse = events
    monkeypatch.setattr(segment_compaction, "MIN_DEAD_ROWS", 10)
    compactions = []
    for step in range(3):
        _update(warehouse, range(step * 20, step * 20 + 20), 1000 + step)
        up = run_project(project, warehouse, only_stale=True).outcome("up")
        compactions.append(up.detail.get("compaction"))
        assert _equal_to_full(warehouse)
    # 20 dead rows for 100 live ones, then 40: no; 60 after the third delta: one new base.
    assert compactions == [None, None, "60 replaced rows held beside 100 live rows"]
    assert len(_segments(warehouse)) == 1
    # Without MIN_DEAD_ROWS's floor lowered, a few dead rows make no compaction by themselves.
    monkeypatch.setattr(segment_compaction, "MIN_DEAD_ROWS", 1000)
    _update(warehouse, range(40, 100), 1010)
    up = run_project(project, warehouse, only_stale=True).outcome("up")
    assert "compaction" not in up.detail and up.detail["stored_rows"] == 160


def test_many_small_deltas_are_merged_without_copying_the_base(events):
    project, warehouse = events
    base = _segments(warehouse)[0]
    merged = None
    for step in range(segment_compaction.MAX_SEGMENTS):
        _update(warehouse, [step], 1000 + step)
        up = run_project(project, warehouse, only_stale=True).outcome("up")
        assert _equal_to_full(warehouse)
        if up.detail.get("compacted"):
            merged = up
    assert merged is not None and merged.detail["compaction"].endswith("those after the base merged")
    assert _segments(warehouse)[0] == base  # the base is the full build's, never copied
    assert merged.detail["stored_rows"] == 100 + 8 and merged.detail["base_rows"] == 100
    # The next deltas build on the merged segment as on any other.
    _update(warehouse, [0, 50], 2000)
    run_project(project, warehouse, only_stale=True)
    assert len(_segments(warehouse)) == 3 and _equal_to_full(warehouse)


def test_deltas_that_only_add_rows_are_merged_later(events, monkeypatch):
    project, warehouse = events
    monkeypatch.setattr(segment_compaction, "MAX_ADDED_SEGMENTS", 4)
    for step in range(4):
        sql(
            warehouse,
            "INSERT INTO raw.events VALUES (?, 'open', 1, ? + to_hours(?))",
            [1000 + step, T0, 1000 + step],
        )
        up = run_project(project, warehouse, only_stale=True).outcome("up")
        assert _equal_to_full(warehouse)
    # New keys replace no row: no keys table, no anti-join; the fifth segment merges those after the base.
    assert up.detail["compaction"] == "5 segments (at most 4): those after the base merged"
    assert len(_segments(warehouse)) == 2


def test_keys_without_null_are_anti_joined_in_one_read_with_the_same_rows():
    """The composite's short anti-join for keys tables with no NULL (sql.segments) keeps
    exactly the rows the NULL-safe one keeps, a row with a NULL key among them."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA strata_snapshots")
    con.execute(
        "CREATE TABLE strata_snapshots.base AS SELECT * FROM (VALUES (1, 'a'), (NULL, 'b'), (2, 'c')) t(k, v)"
    )
    con.execute("CREATE TABLE strata_snapshots.d1 AS SELECT * FROM (VALUES (2, 'c2'), (3, 'd')) t(k, v)")
    con.execute("CREATE TABLE strata_snapshots.d1__keys AS SELECT * FROM (VALUES (2), (3)) t(k)")
    con.execute("CREATE TABLE strata_snapshots.d2 AS SELECT * FROM (VALUES (3, 'd2')) t(k, v)")
    con.execute("CREATE TABLE strata_snapshots.d2__keys AS SELECT * FROM (VALUES (3)) t(k)")
    rows = {}
    for is_null_free in (False, True):
        segments = [
            Segment("base"),
            Segment("d1", "d1__keys", is_null_free),
            Segment("d2", "d2__keys", is_null_free),
        ]
        query = composite_query(segments, ["k"])
        rows[is_null_free] = sorted(con.execute(render(query)).fetchall(), key=str)
        assert ("IS NULL" in render(query)) is not is_null_free
    assert rows[True] == rows[False] == sorted([(1, "a"), (None, "b"), (2, "c2"), (3, "d2")], key=str)
