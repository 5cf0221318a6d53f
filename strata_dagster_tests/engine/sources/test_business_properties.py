"""Property: over random sequences of partition arrivals (some still being written), the append
model and the day-partitioned aggregate over a business-versioned source equal a full recompute
over the consumed partitions after every run, for a Parquet folder and for a table."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.business_support import (
    day,
    full_daily_totals,
    full_events_log,
    make_file_project,
    make_table_project,
    write_file_partition,
    write_table_partition,
)
from strata_dagster_tests.support.engine_support import row_multiset, sql

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

# Each run: the partitions arriving before it, as (rows, is_complete_now).
arrivals = st.lists(
    st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=0, max_size=3), min_size=2, max_size=3
)
PROPERTY_SETTINGS = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _last_consumed(warehouse) -> str | None:
    rows = sql(warehouse, "SELECT max(partition_key) FROM strata.source_ledger WHERE NOT is_reset")
    return rows[0][0]


def _assert_equal_to_full(warehouse, source: str) -> None:
    last = _last_consumed(warehouse)
    consumed = (
        f"(SELECT * FROM {source} WHERE dt <= DATE '{last}')"
        if last
        else f"(SELECT * FROM {source} WHERE false)"
    )
    for view, query in (("events_log", full_events_log), ("daily_totals", full_daily_totals)):
        assert row_multiset(warehouse, f"main.v_{view}") == row_multiset(warehouse, f"({query(consumed)})"), (
            view
        )


@PROPERTY_SETTINGS
@given(steps=arrivals)
def test_file_source_models_equal_a_full_recompute_after_every_arrival(tmp_path_factory, steps):
    project, warehouse = make_file_project(tmp_path_factory.mktemp("files"), "  complete_when: '_SUCCESS'")
    write_file_partition(project, 0, 3, marker="_SUCCESS")
    source = f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"
    index, waiting = 1, []
    for step in steps:
        for folder in waiting:  # the writer finishes what it started
            (project / "events" / f"dt={day(folder).isoformat()}" / "_SUCCESS").write_text("")
        waiting = []
        for rows, is_complete in step:
            write_file_partition(project, index, rows, marker="_SUCCESS" if is_complete else None)
            if not is_complete:
                waiting.append(index)
            index += 1
        run_project(project, warehouse)
        _assert_equal_to_full(warehouse, source)


@PROPERTY_SETTINGS
@given(steps=arrivals)
def test_table_source_models_equal_a_full_recompute_after_every_arrival(tmp_path_factory, steps):
    project, warehouse = make_table_project(tmp_path_factory.mktemp("table"), "  settle: 1")
    write_table_partition(warehouse, 0, 3)
    index = 1
    for step in steps:
        for rows, _ in step:
            write_table_partition(warehouse, index, max(rows, 1))
            index += 1
        run_project(project, warehouse)
        _assert_equal_to_full(warehouse, "raw.events")


MONTHLY = """
model monthly_totals {
  from events
  group dt
  aggregate n = count(*), total = sum(amount)
  partitioned_by: month(dt)
}
"""
# Which models a run builds: all, or one of them (the ledger then advances past the others).
SELECTIONS = ((), ("events_log",), ("daily_totals",), ("monthly_totals",))


@PROPERTY_SETTINGS
@given(
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 5), max_size=3), st.sampled_from(SELECTIONS)),
        min_size=2,
        max_size=4,
    )
)
def test_deltas_reading_only_the_needed_files_equal_a_full_recompute(tmp_path_factory, steps):
    """Deltas read the files of the partitions they need by name (engine.builds.business_delta): with runs
    that build only some models, a model's delta must also read partitions consumed by runs it was
    not in, and a month model whole months; every built model equals a full recompute."""
    project, warehouse = make_file_project(tmp_path_factory.mktemp("narrow"))
    (project / "monthly.strata").write_text(MONTHLY)
    write_file_partition(project, 0, 3)
    source = f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"
    run_project(project, warehouse)
    index = 1
    for rows_per_day, models in [*steps, ((), ())]:
        for rows in rows_per_day:
            write_file_partition(project, index, rows)
            index += 16  # about two days in three fall into a new month
        run_project(project, warehouse, models=models)
        last = _last_consumed(warehouse)
        consumed = f"(SELECT * FROM {source} WHERE dt <= DATE '{last}')"
        for view, query in (
            ("events_log", full_events_log),
            ("daily_totals", full_daily_totals),
            ("monthly_totals", full_daily_totals),
        ):
            if not models or view in models:
                expected = row_multiset(warehouse, f"({query(consumed)})")
                assert row_multiset(warehouse, f"main.v_{view}") == expected, (view, models)
