"""`lateness` and late rows on real DuckDB files: a re-read that brings nothing new publishes
nothing (early cutoff), and rows stamped below the re-read region force a full build, for every
merge strategy."""

import datetime as dt
import json

import duckdb
import pytest

from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import sql, view_tables
from strata_dagster_tests.support.incremental_support import (
    FULL_AN,
    FULL_AP,
    FULL_UP,
    LATE_MODULE,
    MODULE,
    make_project,
    multiset,
)

T0 = dt.datetime(2025, 1, 1)
MODELS = ("up", "ap", "an")


@pytest.fixture
def late_events(tmp_path):
    project, warehouse = make_project(tmp_path, LATE_MODULE)
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT range, 'open', range % 7, ? + to_hours(range) FROM range(20)",
        [T0],
    )
    return project, warehouse


def live_state(warehouse, model):
    """What a run may not change when nothing changed: the live snapshot, its content identity,
    how many segments the view composes, and the view's definition."""
    snapshot_id, content_hash, segments = sql(
        warehouse,
        "SELECT s.snapshot_id, s.content_hash, len(p.snapshot_ids) FROM strata.publications p "
        "JOIN strata.snapshots s ON s.snapshot_id = p.snapshot_ids[-1] "
        "WHERE p.model = ? ORDER BY p.entry DESC LIMIT 1",
        [model],
    )[0]
    return snapshot_id, content_hash, segments, view_tables(warehouse)[f"v_{model}"]


def equals_full(warehouse, model, full):
    con = duckdb.connect(str(warehouse))
    try:
        return multiset(con, f"SELECT * FROM main.v_{model}") == multiset(con, full)
    finally:
        con.close()


def test_rereading_an_unchanged_lateness_window_publishes_nothing(late_events):
    """Plain runs (every model recomputed) over an unchanged source: the lateness window holds rows,
    the delta equals what they replace, so no segment is written and no view is repointed."""
    project, warehouse = late_events
    run_project(project, warehouse)
    before = {model: live_state(warehouse, model) for model in MODELS}
    for _ in range(3):
        result = run_project(project, warehouse)
        assert {model: result.outcome(model).path for model in MODELS} == dict.fromkeys(MODELS, "cutoff")
        assert not any(result.outcome(model).is_published for model in MODELS)
        assert {model: live_state(warehouse, model) for model in MODELS} == before


def test_a_real_change_after_cutoffs_still_builds_a_delta(late_events):
    project, warehouse = late_events
    run_project(project, warehouse)
    run_project(project, warehouse)  # a cutoff
    sql(warehouse, "UPDATE raw.events SET v = 6, ts = ? + INTERVAL 30 HOUR WHERE id = 19", [T0])
    sql(warehouse, "INSERT INTO raw.events VALUES (100, 'open', 1, ? + INTERVAL 31 HOUR)", [T0])
    result = run_project(project, warehouse)
    assert {model: result.outcome(model).path for model in MODELS} == dict.fromkeys(MODELS, "delta")
    assert equals_full(warehouse, "up", FULL_UP)
    ids = [row[0] for row in sql(warehouse, "SELECT id FROM main.v_ap ORDER BY id, ts")]
    assert ids == [*range(19), 19, 19, 100]  # append keeps both versions of row 19, each once
    assert sql(warehouse, "SELECT count(*) FROM main.v_an WHERE id = 19") == [(1,)]


def recorded_reason(warehouse, model):
    detail = sql(
        warehouse,
        "SELECT detail FROM strata.entry_models WHERE model = ? ORDER BY entry DESC LIMIT 1",
        [model],
    )[0][0]
    return json.loads(detail).get("full_reason")


@pytest.mark.parametrize("versioning", ["cdc(ts)", "full"])
@pytest.mark.parametrize("module", [MODULE, LATE_MODULE], ids=["no_lateness", "lateness"])
def test_a_row_stamped_below_the_window_rebuilds_append_models_fully(tmp_path, module, versioning):
    """A writer commits late, beyond `lateness`: the row is below every window this build reads.
    Append and append_new rebuild fully, say why in the history, and equal a full rebuild."""
    project, warehouse = make_project(tmp_path, module, versioning)
    sql(warehouse, "INSERT INTO raw.events SELECT range, 'open', 1, ? + to_hours(range) FROM range(20)", [T0])
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (777, 'open', 2, ? + INTERVAL 5 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    for model, full in (("ap", FULL_AP), ("an", FULL_AN), ("up", FULL_UP)):
        assert result.outcome(model).path == "full", model
        assert "appeared at or below the watermark" in recorded_reason(warehouse, model), model
        assert equals_full(warehouse, model, full), model
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_a_late_row_inside_lateness_is_a_delta_for_append_models(late_events):
    """Within `lateness` the re-read picks the late row up: no full build is needed."""
    project, warehouse = late_events
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (777, 'open', 2, ? + INTERVAL 18 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert {model: result.outcome(model).path for model in MODELS} == dict.fromkeys(MODELS, "delta")
    for model, full in (("ap", FULL_AP), ("an", FULL_AN), ("up", FULL_UP)):
        assert equals_full(warehouse, model, full), model


JOINED = """
source kinds { table: raw.kinds }
model joined_ap {
  from events
  join left kinds using (status)
  incremental
  merge_strategy: append
  cdc_column: ts
  lateness: '2 hours'
}
model joined_an {
  from events
  join kinds using (status)
  incremental
  merge_strategy: append_new
  merge_keys: [id]
  cdc_column: ts
}
"""
FULL_JOINED_AP = "SELECT * FROM raw.events LEFT JOIN raw.kinds USING (status)"
FULL_JOINED_AN = "SELECT * FROM raw.events JOIN raw.kinds USING (status)"


def test_a_late_row_below_the_window_of_a_recomputed_model_rebuilds_it(tmp_path):
    """A join hides the cdc column's source (the model is computed in full, then windowed): the
    gate counts the model's own rows at or below the watermark instead."""
    project, warehouse = make_project(tmp_path, MODULE + JOINED)
    sql(warehouse, "CREATE TABLE raw.kinds AS SELECT 'open' AS status, 'o' AS kind")
    sql(warehouse, "INSERT INTO raw.events SELECT range, 'open', 1, ? + to_hours(range) FROM range(20)", [T0])
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (50, 'open', 1, ? + INTERVAL 30 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert {result.outcome(model).path for model in ("joined_ap", "joined_an")} == {"delta"}
    sql(warehouse, "INSERT INTO raw.events VALUES (777, 'open', 2, ? + INTERVAL 5 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    for model, full in (("joined_ap", FULL_JOINED_AP), ("joined_an", FULL_JOINED_AN)):
        assert result.outcome(model).path == "full", model
        assert "appeared at or below the watermark" in recorded_reason(warehouse, model), model
        assert equals_full(warehouse, model, full), model
    result = run_project(project, warehouse)  # nothing changed: the lateness re-read is a cutoff
    assert {result.outcome(model).path for model in ("joined_ap", "joined_an")} == {"cutoff"}


@pytest.mark.parametrize("versioning", ["cdc(ts)", "full"])
def test_rows_that_left_below_the_watermark_do_not_hide_a_later_late_row(tmp_path, versioning):
    """Deleting consumed rows changes no model row (append keeps its history; the upsert held no
    `void` row), but the count the state carries no longer describes the source: the build records
    a new state with the new count, so a late row in the next run is still seen."""
    project, warehouse = make_project(tmp_path, MODULE, versioning)
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT range, CASE WHEN range < 5 THEN 'void' ELSE 'open' END, 1, "
        "? + to_hours(range) FROM range(20)",
        [T0],
    )
    run_project(project, warehouse)
    sql(warehouse, "DELETE FROM raw.events WHERE id < 5")
    result = run_project(project, warehouse, only_stale=True)
    assert {model: result.outcome(model).path for model in MODELS} == dict.fromkeys(MODELS, "delta")
    assert result.outcome("ap").rows == 20 and result.outcome("an").rows == 20  # history kept
    sql(warehouse, "INSERT INTO raw.events VALUES (777, 'open', 2, ? + INTERVAL 2 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    for model, full in (("ap", FULL_AP), ("an", FULL_AN), ("up", FULL_UP)):
        assert result.outcome(model).path == "full", model
        assert "appeared at or below the watermark" in recorded_reason(warehouse, model), model
        assert equals_full(warehouse, model, full), model


@pytest.mark.parametrize("versioning", ["cdc(ts)", "full"])
def test_a_row_deleted_inside_the_lateness_band_leaves_the_upsert_model(tmp_path, versioning):
    """Under `lateness` the band (watermark - lateness, watermark] is read again; a row deleted
    there is in no window, so without replacing the live keys of the band it stayed in the model
    (found by the property test: counts at or below `low` do not see it)."""
    project, warehouse = make_project(tmp_path, LATE_MODULE, versioning=versioning)
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT range, 'open', range % 7, ? + to_hours(range) FROM range(20)",
        [T0],
    )
    run_project(project, warehouse)
    # id 19 carries the watermark; id 18 is one hour below it, inside the two-hour band.
    sql(warehouse, "DELETE FROM raw.events WHERE id = 18")
    sql(warehouse, "INSERT INTO raw.events VALUES (20, 'open', 1, ? + to_hours(20))", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    assert equals_full(warehouse, "up", FULL_UP)
    assert 18 not in {row[0] for row in sql(warehouse, "SELECT id FROM main.v_up")}
