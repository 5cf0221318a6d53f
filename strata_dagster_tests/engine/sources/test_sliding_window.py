"""`sliding_window(N)`: models read the source's last N consumed partitions; an aggregate over it is
kept from the window's weighted delta (entering +1, leaving -1) and equals a full recompute over
the window after every run; any other shape builds in full, with the reason in history."""

import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.cli.main import main
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.reads.explain import build_why
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import row_multiset, sql
from strata_dagster_tests.support.paths import REPO
from strata_dagster_tests.support.sliding_window_support import (
    assert_window_models_equal_full,
    make_window_project,
    remove_drop,
    window_relation,
    write_drop,
)

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

EVENTS_EXAMPLE = REPO / "examples" / "events"
rows = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "z", None]), st.one_of(st.none(), st.integers(-3, 9))),
    max_size=4,
)
# Each run: the drops arriving before it (1 to 3), each with 0 to 4 rows.
arrivals = st.lists(st.lists(rows, min_size=1, max_size=3), min_size=2, max_size=4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(1, 4), first=rows, steps=arrivals)
def test_window_aggregate_equals_a_full_recompute_over_the_window_after_every_run(
    tmp_path_factory, size, first, steps
):
    project, warehouse = make_window_project(tmp_path_factory.mktemp("window"), size)
    write_drop(project, 0, first)
    run_project(project, warehouse)
    assert_window_models_equal_full(warehouse, window_relation(project, 0, 0))
    last = 0
    for step in steps:
        for drop in step:
            last += 1
            write_drop(project, last, drop)
        result = run_project(project, warehouse)
        # The aggregate is kept from the delta (the window always moves here), never rebuilt.
        assert result.outcome("window_totals").path == "delta"
        assert result.outcome("window_rows").path in ("full", "cutoff")  # cutoff: equal rows
        assert_window_models_equal_full(warehouse, window_relation(project, max(0, last - size + 1), last))


def test_window_rows_and_history_say_how_each_model_was_built(tmp_path):
    project, warehouse = make_window_project(tmp_path, 2)
    for index in range(3):
        write_drop(project, index, [("a", index), ("b", 10 + index)])
    run_project(project, warehouse)
    # A full build of any model reads the last 2 partitions only.
    assert sql(warehouse, "SELECT DISTINCT amount FROM main.v_window_rows ORDER BY 1") == [(11,), (12,)]
    assert sql(warehouse, "SELECT kind, n, total FROM main.v_window_totals ORDER BY 1") == [
        ("a", 2, 3),
        ("b", 2, 23),
    ]
    write_drop(project, 3, [("c", 5)])
    planned = plan_project(project, warehouse, only_stale=True)
    result = run_project(project, warehouse)
    totals, rows_model = result.outcome("window_totals"), result.outcome("window_rows")
    assert (planned.model("window_totals").path, planned.model("window_rows").path) == ("delta", "full")
    assert totals.path in planned.model("window_totals").allowed
    assert rows_model.path in planned.model("window_rows").allowed
    assert totals.detail["partitions_entering"] == ["2026-03-04"]
    assert totals.detail["partitions_leaving"] == ["2026-03-02"]
    assert build_why("window_totals", totals.path, totals.detail, totals.rows).startswith(
        "sliding window moved (+2026-03-04; -2026-03-02)"
    )
    assert "`events` is a sliding window" in build_why("window_rows", rows_model.path, rows_model.detail, 0)
    # Group `b` left with its last partition; `c` arrived.
    assert sql(warehouse, "SELECT kind, n, total, lo FROM main.v_window_totals ORDER BY 1") == [
        ("a", 1, 2, 2),
        ("b", 1, 12, 12),
        ("c", 1, 5, 5),
    ]
    # Nothing new: the window does not move and the snapshot stays.
    again = run_project(project, warehouse)
    assert again.outcome("window_totals").path == "cutoff"
    assert again.outcome("window_totals").snapshot_id == totals.snapshot_id


def test_a_leaving_partition_that_is_gone_makes_the_aggregate_recompute_the_window(tmp_path):
    project, warehouse = make_window_project(tmp_path, 2)
    for index in range(2):
        write_drop(project, index, [("a", index + 1)])
    run_project(project, warehouse)
    remove_drop(project, 0)  # retention upstream: the partition leaving the window is deleted
    write_drop(project, 2, [("a", 7)])
    result = run_project(project, warehouse)
    outcome = result.outcome("window_totals")
    assert outcome.path == "full"
    assert "leaving the window of `events` are gone (2026-03-01)" in outcome.detail["full_reason"]
    assert_window_models_equal_full(warehouse, window_relation(project, 1, 2))
    # The next run slides from the recomputed state again.
    write_drop(project, 3, [("b", 1)])
    assert run_project(project, warehouse).outcome("window_totals").path == "delta"
    assert_window_models_equal_full(warehouse, window_relation(project, 2, 3))


def test_gc_drops_the_hidden_window_state_with_its_snapshot(tmp_path):
    project, warehouse = make_window_project(tmp_path, 1)
    write_drop(project, 0, [("a", 1)])
    first = run_project(project, warehouse).outcome("window_totals")
    write_drop(project, 1, [("a", 2)])
    run_project(project, warehouse)
    state = f"{first.table_name}__window"
    tables = "SELECT table_name FROM information_schema.tables WHERE table_name = ?"
    assert sql(warehouse, tables, [state]) == [(state,)]
    gc(warehouse, keep=1)
    assert sql(warehouse, tables, [state]) == []


def test_the_events_example_keeps_its_weekly_kinds_from_the_sliding_window(tmp_path):
    project = tmp_path / "events"
    shutil.copytree(EVENTS_EXAMPLE, project, ignore=shutil.ignore_patterns("events", "*.duckdb*"))
    warehouse = tmp_path / "w.duckdb"
    for days in (8, 9):
        written = CliRunner().invoke(
            main, ["sample-data", str(project), "--days", str(days), "--rows", "200"]
        )
        assert written.exit_code == 0, written.output
        result = run_project(project, warehouse)
    outcome = result.outcome("kinds_last_week")
    assert (outcome.path, outcome.detail["partitions_leaving"]) == ("delta", ["2026-01-02"])
    files = f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"
    full = (
        "SELECT kind, count(*) AS events, sum(CAST(round(amount * 100) AS BIGINT)) AS cents, "
        f"count(DISTINCT user_id) AS users FROM {files} WHERE dt > DATE '2026-01-02' GROUP BY kind"
    )
    assert row_multiset(warehouse, "main.v_kinds_last_week") == row_multiset(warehouse, f"({full})")
    assert verify(project, warehouse, models=["kinds_last_week"]).is_equal
