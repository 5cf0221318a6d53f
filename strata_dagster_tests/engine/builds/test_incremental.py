"""Incremental merges on real DuckDB files: paths taken, pushdown, safety checks, history."""

import datetime as dt
import json

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster_tests.support.engine_support import edit_module, sql
from strata_dagster_tests.support.incremental_support import FULL_UP, MODULE, make_project, multiset

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)

T0 = dt.datetime(2025, 1, 1)


def fill_events(warehouse):
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT range, 'open', range % 7, ? + to_hours(range) FROM range(100)",
        [T0],
    )


@pytest.fixture
def events(tmp_path):
    project, warehouse = make_project(tmp_path)
    fill_events(warehouse)
    return project, warehouse


def paths(result):
    return {outcome.model: outcome.path for outcome in result.outcomes}


def latest_detail(warehouse, model):
    rows = sql(
        warehouse,
        "SELECT path, sql, detail FROM strata.entry_models WHERE model = ? ORDER BY entry DESC LIMIT 1",
        [model],
    )
    path, text, detail = rows[0]
    return path, text, json.loads(detail)


def up_equals_full(warehouse):
    con = duckdb.connect(str(warehouse))
    try:
        return multiset(con, "SELECT * FROM main.v_up") == multiset(con, FULL_UP)
    finally:
        con.close()


def test_first_build_is_full_then_deltas(events):
    project, warehouse = events
    assert set(paths(run_project(project, warehouse)).values()) == {"full"}
    sql(warehouse, "INSERT INTO raw.events VALUES (1000, 'open', 1, ? + INTERVAL 1000 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert paths(result) == {"up": "delta", "ap": "delta", "an": "delta"}
    assert result.outcome("up").rows == 101 and result.outcome("ap").rows == 101
    assert up_equals_full(warehouse)
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_window_and_figures_are_in_history(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(
        warehouse,
        "INSERT INTO raw.events SELECT 500 + range, 'open', 1, ? + INTERVAL 500 HOUR FROM range(3)",
        [T0],
    )
    result = run_project(project, warehouse, only_stale=True)
    path, _, detail = latest_detail(warehouse, "ap")
    assert path == "delta"
    assert detail["window"] == {"low": "2025-01-05 03:00:00", "high": "2025-01-21 20:00:00", "lateness": None}
    assert detail["rows_read"] == 3 and detail["rows_merged"] == 3
    assert result.outcome("ap").detail["rows_merged"] == 3


def test_an_early_cutoff_moves_the_window_so_the_next_build_reads_only_what_is_new(events):
    """A window whose rows the model's filter drops leaves the state as it is (early cutoff), but
    was read: the next build starts at its end, not where the state was built."""
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (500, 'open', -1, ? + INTERVAL 500 HOUR)", [T0])
    assert run_project(project, warehouse, only_stale=True).outcome("an").path == "cutoff"
    _, _, cutoff = latest_detail(warehouse, "an")
    assert cutoff["window"]["high"] == "2025-01-21 20:00:00"
    sql(warehouse, "INSERT INTO raw.events VALUES (600, 'open', 2, ? + INTERVAL 600 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    path, _, detail = latest_detail(warehouse, "an")
    assert path == "delta" and result.outcome("an").path == "delta"
    assert detail["window"]["low"] == "2025-01-21 20:00:00"  # not the first build's 2025-01-05 03:00:00
    assert detail["rows_read"] == 1 and detail["rows_merged"] == 1
    con = duckdb.connect(str(warehouse))
    try:
        full_an = "SELECT id, v, ts FROM raw.events WHERE v >= 0"
        assert multiset(con, "SELECT * FROM main.v_an") == multiset(con, full_an)
    finally:
        con.close()


def test_pushdown_puts_the_window_in_the_base_cte(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (1000, 'open', 1, ? + INTERVAL 1000 HOUR)", [T0])
    run_project(project, warehouse, only_stale=True)
    for model in ("ap", "an"):
        _, text, detail = latest_detail(warehouse, model)
        assert detail["pushdown"] is True
        where = base_where(text).sql(dialect="duckdb")
        assert "ts > CAST('2025-01-05 03:00:00' AS TIMESTAMP)" in where
        assert "__full" not in text


def base_where(text):
    statement = sqlglot.parse_one(text, read="duckdb")
    base = next(cte.this for cte in statement.find_all(exp.CTE) if cte.alias == "__base")
    return base.args["where"]


def test_an_upsert_matches_a_null_key_null_safely(events):
    """A NULL merge key is one key: its updated row replaces its old version (NULL-safe semi-join
    for the delta, NULL-safe match for the rows it replaces), beside an ordinary key."""
    project, warehouse = events
    sql(warehouse, "INSERT INTO raw.events VALUES (NULL, 'open', 3, ? + INTERVAL 5 HOUR)", [T0])
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET v = 6, ts = ts + INTERVAL 2000 HOUR WHERE id IS NULL OR id = 40")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    assert result.outcome("up").detail["rows_replaced"] == 2
    assert up_equals_full(warehouse)
    assert sql(warehouse, "SELECT v FROM main.v_up WHERE id IS NULL OR id = 40 ORDER BY id") == [(6,), (6,)]


def test_join_model_recomputes_then_filters(tmp_path):
    module = (
        MODULE
        + """
source kinds { table: raw.kinds }
model joined {
  from events
  join left kinds using (status)
  incremental
  merge_strategy: append
  cdc_column: ts
}
"""
    )
    project, warehouse = make_project(tmp_path, module)
    sql(warehouse, "CREATE TABLE raw.kinds AS SELECT 'open' AS status, 'o' AS kind")
    sql(warehouse, "INSERT INTO raw.events VALUES (1, 'open', 1, ?)", [T0])
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (2, 'open', 1, ? + INTERVAL 1 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("joined").path == "delta"
    _, text, detail = latest_detail(warehouse, "joined")
    assert detail["pushdown"] is False
    assert "__full" in text
    assert sql(warehouse, "SELECT id, kind FROM main.v_joined ORDER BY id") == [(1, "o"), (2, "o")]


def test_date_cdc_column_pushes_a_date_literal(tmp_path):
    module = """
source events { table: raw.events }
model daily_ap {
  from events
  let day = cast(ts as date)
  select id, day
  incremental
  merge_strategy: append
  cdc_column: day
}
"""
    project, warehouse = make_project(tmp_path, module)
    sql(warehouse, "INSERT INTO raw.events VALUES (1, 'open', 1, ?)", [T0])
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (2, 'open', 1, ? + INTERVAL 2 DAY)", [T0])
    assert run_project(project, warehouse, only_stale=True).outcome("daily_ap").path == "delta"
    _, text, _ = latest_detail(warehouse, "daily_ap")
    assert "CAST(orders" not in text and "CAST('2025-01-01' AS DATE)" in text
    assert sql(warehouse, "SELECT count(*) FROM main.v_daily_ap") == [(2,)]


def test_update_out_of_the_filter_leaves_the_upsert(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET status = 'void', ts = ts + INTERVAL 1000 HOUR WHERE id = 5")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    assert sql(warehouse, "SELECT count(*) FROM main.v_up WHERE id = 5") == [(0,)]
    assert up_equals_full(warehouse)
    sql(warehouse, "UPDATE raw.events SET status = 'open', ts = ts + INTERVAL 1 HOUR WHERE id = 5")
    run_project(project, warehouse, only_stale=True)
    assert sql(warehouse, "SELECT count(*) FROM main.v_up WHERE id = 5") == [(1,)]
    assert up_equals_full(warehouse)


def test_deleted_keys_are_dropped_by_the_upsert(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "DELETE FROM raw.events WHERE id IN (3, 4)")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    _, _, detail = latest_detail(warehouse, "up")
    assert detail["deleted_keys_checked"] is True and detail["changed_keys"] == 2
    assert up_equals_full(warehouse)
    # append and append_new keep what they had: their definition is previous plus the window.
    assert sql(warehouse, "SELECT count(*) FROM main.v_ap") == [(100,)]


def test_updates_prove_no_deletes_without_the_anti_join(events):
    """Rows that left the old region by an update: the kept rows match what the source gives now,
    so no deleted-key anti-join runs, and the upsert still equals a full rebuild."""
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET status = 'void', ts = ts + INTERVAL 1000 HOUR WHERE id IN (5, 6)")
    sql(warehouse, "UPDATE raw.events SET v = v + 1, ts = ts + INTERVAL 1000 HOUR WHERE id = 9")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    _, _, detail = latest_detail(warehouse, "up")
    assert detail["kept_rows_checked"] is True and detail["deleted_keys_checked"] is False
    assert detail["changed_keys"] == 3
    assert up_equals_full(warehouse)


def test_a_deleted_row_the_model_filtered_out_changes_nothing(events):
    """No model row changes, so the content (the data version) stays; the state is new all the same,
    carrying the smaller count below the watermark that the next build's gate compares against
    (test_incremental_lateness)."""
    project, warehouse = events
    sql(warehouse, "UPDATE raw.events SET status = 'void' WHERE id = 11")
    before = run_project(project, warehouse).outcome("up").snapshot_id
    sql(warehouse, "DELETE FROM raw.events WHERE id = 11")
    result = run_project(project, warehouse, only_stale=True)
    outcome = result.outcome("up")
    assert outcome.path == "delta" and outcome.detail["rows_merged"] == 0
    assert outcome.detail["kept_rows_checked"] is True and outcome.detail["deleted_keys_checked"] is False
    content = "SELECT content_hash FROM strata.snapshots WHERE snapshot_id = ?"
    assert sql(warehouse, content, [outcome.snapshot_id]) == sql(warehouse, content, [before])
    assert up_equals_full(warehouse)


def test_an_update_and_a_delete_together_run_the_anti_join(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET v = 50, ts = ts + INTERVAL 1000 HOUR WHERE id = 2")
    sql(warehouse, "DELETE FROM raw.events WHERE id = 40")
    run_project(project, warehouse, only_stale=True)
    _, _, detail = latest_detail(warehouse, "up")
    assert detail["kept_rows_checked"] is True and detail["deleted_keys_checked"] is True
    assert detail["changed_keys"] == 2
    assert sql(warehouse, "SELECT count(*) FROM main.v_up WHERE id = 40") == [(0,)]
    assert up_equals_full(warehouse)


def test_in_place_change_without_advancing_cdc_is_not_in_the_delta(events):
    """By the cdc contract (docs/architecture.md, R5) such a change is invisible to the next run
    (verify finds it). The source is versioned by `ts`, so its fingerprint hashes `ts` alone:
    nothing to do at all, and a later change that advances `ts` does not carry the silent edit
    along."""
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET v = 99 WHERE id = 7")
    assert run_project(project, warehouse, only_stale=True).is_noop
    sql(warehouse, "UPDATE raw.events SET v = 5, ts = ts + INTERVAL 1000 HOUR WHERE id = 3")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    assert sql(warehouse, "SELECT v FROM main.v_up WHERE id IN (3, 7) ORDER BY id") == [(5,), (0,)]
    assert sql(warehouse, "SELECT v FROM main.v_ap WHERE id = 7") == [(0,)]


@pytest.mark.parametrize(
    ("change", "is_seen"),
    [
        ("INSERT INTO raw.events VALUES (500, 'open', 1, TIMESTAMP '2030-01-01')", True),
        ("UPDATE raw.events SET v = 9, ts = TIMESTAMP '2030-01-01' WHERE id = 50", True),
        ("DELETE FROM raw.events WHERE id = 50", True),
        # A delete and an insert together: the count stays, the new row advances `ts`.
        (
            "DELETE FROM raw.events WHERE id = 50; INSERT INTO raw.events VALUES (500, 'open', 1, TIMESTAMP '2030-01-01')",
            True,
        ),
        # Replaced and reloaded, re-stamped by the load.
        (
            "CREATE OR REPLACE TABLE raw.events AS SELECT id, status, v, TIMESTAMP '2030-01-01' + to_seconds(id) AS ts FROM raw.events",
            True,
        ),
        ("UPDATE raw.events SET v = 9, status = 'void' WHERE id = 50", False),  # `ts` not advanced
        ("CREATE OR REPLACE TABLE raw.events AS SELECT * FROM raw.events ORDER BY id DESC", False),
    ],
)
def test_a_cdc_sources_fingerprint_sees_every_change_its_contract_allows(events, change, is_seen):
    """`versioning: cdc(ts)`: the row count and the range of `ts` (read from DuckDB's statistics,
    no row hashed) change with every insert, advancing update, delete and re-stamping reload; an
    edit that leaves `ts` alone, or the same rows in another order, are the same content."""
    project, warehouse = events
    before = observe_sources(project, warehouse)["events"]
    sql(warehouse, change)
    after = observe_sources(project, warehouse)["events"]
    assert (after.fingerprint != before.fingerprint) is is_seen
    assert after.row_basis == ("ts",)


def test_a_fully_versioned_source_sees_an_in_place_edit_and_the_upsert_notes_it(tmp_path):
    """`versioning: full` hashes whole rows: the edit changes the source's fingerprint, the upsert
    runs, finds no row in its window, and records that the edit is not applied (cdc contract)."""
    project, warehouse = make_project(tmp_path, versioning="full")
    fill_events(warehouse)
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET v = 99 WHERE id = 7")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "cutoff"
    assert sql(warehouse, "SELECT v FROM main.v_up WHERE id = 7") == [(0,)]
    assert sql(warehouse, "SELECT v FROM main.v_ap WHERE id = 7") == [(0,)]
    _, _, detail = latest_detail(warehouse, "up")
    assert any("without advancing cdc_column" in note for note in detail["notes"])
    assert run_project(project, warehouse, only_stale=True).is_noop  # the decision was recorded


def test_changing_a_sources_versioning_rebuilds_its_incremental_models(events):
    """The figures a delta compares were hashed over another basis: build fully and say why."""
    project, warehouse = events
    run_project(project, warehouse)
    edit_module(project / "events.strata", "versioning: cdc(ts)", "versioning: full")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "full"
    assert "changed its `versioning`" in result.outcome("up").detail["full_reason"]
    assert up_equals_full(warehouse)


def test_an_in_place_edit_beside_an_update_is_noted_not_applied(events):
    """The kept-rows check compares row versions (merge keys and cdc column) of the rows the model
    holds: an edit that moves a row out of the filter without advancing `ts` changes them, the
    anti-join finds no key gone, and the detail says the edit is not applied."""
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET v = 4, ts = ts + INTERVAL 1000 HOUR WHERE id = 3")
    sql(warehouse, "UPDATE raw.events SET status = 'void' WHERE id = 7")  # ts not advanced
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "delta"
    _, _, detail = latest_detail(warehouse, "up")
    assert detail["deleted_keys_checked"] is True and detail["changed_keys"] == 1
    assert any("without advancing cdc_column" in note for note in detail["notes"])
    assert sql(warehouse, "SELECT count(*) FROM main.v_up WHERE id = 7") == [(1,)]


def test_the_state_carries_its_key_and_cdc_figures(events):
    """What the kept-rows check compares against: kept equal to a fresh count over the live view
    after a full build and after every delta (compaction included)."""
    project, warehouse = events
    run_project(project, warehouse)
    for step in range(10):
        sql(
            warehouse,
            "UPDATE raw.events SET v = v + 1, ts = ts + to_hours(1000 * (? + 1)) WHERE id % 10 = ?",
            [step, step],
        )
        run_project(project, warehouse, only_stale=True)
        _, _, detail = latest_detail(warehouse, "up")
        live = sql(warehouse, "SELECT count(*), sum(hash(id, ts)::HUGEINT) FROM main.v_up")[0]
        recorded = sql(
            warehouse,
            "SELECT detail FROM strata.snapshot_states WHERE model = 'up' ORDER BY created_entry DESC LIMIT 1",
        )
        figures = json.loads(recorded[0][0])["key_cdc_sum"]
        assert (figures[0], int(figures[1])) == (live[0], int(live[1])), step
        assert detail["deleted_keys_checked"] is False
    assert up_equals_full(warehouse)


def test_rows_below_the_watermark_force_a_full_build(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (777, 'open', 1, ?)", [T0])  # late, far below
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "full"
    assert "appeared at or below the watermark" in result.outcome("up").detail["full_reason"]
    assert up_equals_full(warehouse)
    # Append reads no window below its watermark either: it cannot append the row by a delta.
    assert result.outcome("ap").path == "full"
    assert "appeared at or below the watermark" in result.outcome("ap").detail["full_reason"]


def test_a_reloaded_source_with_fewer_rows_is_applied(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(
        warehouse,
        "CREATE OR REPLACE TABLE raw.events AS SELECT * REPLACE (ts + INTERVAL 2000 HOUR AS ts) FROM raw.events WHERE id % 2 = 0",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path in ("delta", "full")
    assert up_equals_full(warehouse)


def test_code_change_rebuilds_fully_with_its_reason(events):
    project, warehouse = events
    run_project(project, warehouse)
    edit_module(project / "events.strata", "filter status <> 'void'", "filter status <> 'gone'")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("up").path == "full"
    assert result.outcome("up").detail["full_reason"] == "the model's code changed since its last build"
    assert result.outcome("ap").path == "reused"


def test_lateness_rereads_without_duplicating_appends(tmp_path):
    project, warehouse = make_project(
        tmp_path,
        MODULE.replace("  merge_strategy: append\n", "  merge_strategy: append\n  lateness: '2 hours'\n"),
    )
    sql(warehouse, "INSERT INTO raw.events SELECT range, 'open', 1, ? + to_hours(range) FROM range(10)", [T0])
    run_project(project, warehouse)
    sql(
        warehouse,
        "INSERT INTO raw.events VALUES (50, 'open', 1, ? + INTERVAL 8 HOUR + INTERVAL 30 MINUTE)",
        [T0],
    )
    sql(warehouse, "INSERT INTO raw.events VALUES (51, 'open', 1, ? + INTERVAL 20 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("ap").path == "delta"
    ids = [row[0] for row in sql(warehouse, "SELECT id FROM main.v_ap ORDER BY id")]
    assert ids == [*range(10), 50, 51]  # the late row 50 is picked up, rows 7-9 are not appended twice


def test_many_deltas_compact_into_one_base(events):
    project, warehouse = events
    run_project(project, warehouse)
    for step in range(10):
        # An update (its key replaces a live row: a keys table) and a new row per delta.
        sql(
            warehouse,
            "UPDATE raw.events SET v = v + 1, ts = ? + to_hours(?) WHERE id = ?",
            [T0, 1000 + step, step],
        )
        sql(
            warehouse,
            "INSERT INTO raw.events VALUES (?, 'open', 1, ? + to_hours(?))",
            [1000 + step, T0, 1000 + step],
        )
        run_project(project, warehouse, only_stale=True)
        assert up_equals_full(warehouse)
    segments = sql(
        warehouse,
        "SELECT len(snapshot_ids) FROM strata.publications WHERE model = 'up' ORDER BY entry DESC LIMIT 1",
    )
    assert segments[0][0] <= 8
    compacted = sql(
        warehouse, "SELECT count(*) FROM strata.entry_models WHERE model = 'up' AND detail LIKE '%compacted%'"
    )
    assert compacted[0][0] >= 1


def test_full_refresh_picks_up_silent_edits(events):
    project, warehouse = events
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.events SET v = 42 WHERE id = 9")
    run_project(project, warehouse, only_stale=True)
    assert not up_equals_full(warehouse)
    result = run_project(project, warehouse, models=["up"], full_refresh=True)
    assert result.outcome("up").path == "full"
    assert result.outcome("up").detail["full_reason"] == "full refresh requested"
    assert up_equals_full(warehouse)


def test_window_functions_make_merges_rebuild_fully(tmp_path):
    module = (
        MODULE
        + """
model ranked {
  from events
  derive seen = count(*) over (partition by status)
  incremental
  merge_strategy: append
  cdc_column: ts
}
"""
    )
    project, warehouse = make_project(tmp_path, module)
    sql(
        warehouse,
        "INSERT INTO raw.events VALUES (1, 'open', 1, ?), (2, 'open', 1, ? + INTERVAL 1 HOUR)",
        [T0, T0],
    )
    run_project(project, warehouse)
    sql(warehouse, "INSERT INTO raw.events VALUES (3, 'open', 1, ? + INTERVAL 2 HOUR)", [T0])
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("ranked").path == "full"
    assert "window function" in result.outcome("ranked").detail["full_reason"]
    assert sql(warehouse, "SELECT max(seen) FROM main.v_ranked") == [(3,)]


def test_many_segments_still_reach_nothing_to_do(events):
    project, warehouse = events
    run_project(project, warehouse)
    for step in range(3):
        sql(
            warehouse,
            "INSERT INTO raw.events VALUES (?, 'open', 1, ? + to_hours(?))",
            [2000 + step, T0, 2000 + step],
        )
        run_project(project, warehouse, only_stale=True)
    assert run_project(project, warehouse, only_stale=True).is_noop
