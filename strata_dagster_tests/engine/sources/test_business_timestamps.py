"""TIMESTAMP-keyed business-versioned sources: a hive folder per hour (`hour=2026-11-29 13:00:00/`,
which DuckDB's hive partitioning types TIMESTAMP) is one partition; a table's TIMESTAMP column is
cut by day. Ledger, delta, frontier, checks and `verify --sources` on real folders and a table,
each model compared with a full recompute."""

import datetime as dt
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.source_verify import mismatch_error, verify_sources
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import execute, row_multiset

FIRST_HOUR = dt.datetime(2026, 11, 29, 20)

MODULE = """
source events {
  %(where)s
  partitioned_by: hour
  start: 2026-11-29
  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true
%(extra)s
}
model events_log {
  from events
  incremental
  merge_strategy: append
  cdc_column: hour
}
model daily_totals {
  from events
  group hour
  aggregate n = count(*), total = sum(amount)
  partitioned_by: day(hour)
}
model hourly_totals {
  from events
  group hour
  aggregate n = count(*), total = sum(amount)
}
"""


def hour(index: int) -> dt.datetime:
    return FIRST_HOUR + dt.timedelta(hours=index)


def _project(root: Path, where: str, extra: str = "") -> tuple[Path, Path]:
    project = root / "project"
    (project / "events").mkdir(parents=True, exist_ok=True)
    (project / "events.strata").write_text(MODULE % {"where": where, "extra": extra})
    return project, root / "w.duckdb"


def _file_project(root: Path, extra: str = "") -> tuple[Path, Path]:
    return _project(root, "path: 'events/*/*.parquet'", extra)


def _folder(project: Path, index: int, style: str = "%Y-%m-%d %H:%M:%S") -> Path:
    return project / "events" / f"hour={hour(index).strftime(style)}"


def _write_hour(
    project: Path,
    index: int,
    rows: int,
    *,
    seed: int = 0,
    marker: bool = False,
    style: str = "%Y-%m-%d %H:%M:%S",
) -> None:
    folder = _folder(project, index, style)
    folder.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT {index} * 1000 + {seed} * 100 + range AS id, (range * 7 + {seed}) % 13 AS amount "
            f"FROM range({rows})) TO '{folder / 'part-0.parquet'}' (FORMAT parquet)"
        )
    finally:
        con.close()
    if marker:
        (folder / "_SUCCESS").write_text("")


def _files(project: Path) -> str:
    return f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"


def _assert_equal_to_full(warehouse: Path, source: str, last: dt.datetime | None = None) -> None:
    consumed = f"(SELECT * FROM {source} WHERE hour <= TIMESTAMP '{last}')" if last else source
    for view, query in (
        ("events_log", f"SELECT id, amount, hour FROM {consumed}"),
        ("daily_totals", f"SELECT hour, count(*) AS n, sum(amount) AS total FROM {consumed} GROUP BY hour"),
        ("hourly_totals", f"SELECT hour, count(*) AS n, sum(amount) AS total FROM {consumed} GROUP BY hour"),
    ):
        assert row_multiset(warehouse, f"main.v_{view}") == row_multiset(warehouse, f"({query})"), view


def test_hourly_folders_are_partitions_from_the_ledger_to_the_checks(tmp_path):
    project, warehouse = _file_project(tmp_path)
    for index in range(3):  # 20:00 to 22:00 of one day
        _write_hour(project, index, 3 + index)
    run_project(project, warehouse)
    _assert_equal_to_full(warehouse, _files(project))
    _write_hour(project, 3, 4)  # 23:00, the same day
    _write_hour(project, 4, 2)  # 00:00, the next day
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("events_log").path == "delta"
    assert result.outcome("daily_totals").path == "partitions"
    _assert_equal_to_full(warehouse, _files(project))
    assert run_project(project, warehouse, only_stale=True).is_noop
    checks = verify_sources(project, warehouse)
    assert [len(check.partitions) for check in checks] == [5]
    assert mismatch_error(checks) is None  # each hour's rows hashed under its own key
    # An hour consumed, rewritten with other rows: immutability, naming the hour.
    _write_hour(project, 1, 7, seed=1)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert (caught.value.code, caught.value.subject) == ("E052", f"events/{hour(1)}")


def test_a_new_hour_before_the_last_consumed_one_is_e053(tmp_path):
    project, warehouse = _file_project(tmp_path)
    for index in (0, 2):
        _write_hour(project, index, 3)
    run_project(project, warehouse)
    _write_hour(project, 1, 3)  # 21:00, after 22:00 was consumed
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert (caught.value.code, caught.value.subject) == ("E053", f"events/{hour(1)}")


def test_an_hour_still_being_written_is_not_read_even_on_the_last_consumed_day(tmp_path):
    """The frontier is the last complete hour, not its day: 22:00 has no marker yet, so no model
    reads its rows although 20:00 and 21:00 of the same day are consumed."""
    project, warehouse = _file_project(tmp_path, "  complete_when: '_SUCCESS'")
    for index in range(2):
        _write_hour(project, index, 3, marker=True)
    _write_hour(project, 2, 5)
    run_project(project, warehouse)
    _assert_equal_to_full(warehouse, _files(project), last=hour(1))
    (_folder(project, 2) / "_SUCCESS").write_text("")
    assert run_project(project, warehouse, only_stale=True).outcome("events_log").path == "delta"
    _assert_equal_to_full(warehouse, _files(project))


def test_folder_values_written_otherwise_are_the_values_duckdb_reads(tmp_path):
    """`hour=2026-11-29 20:00/` and `hour=2026-11-29T21:00:00/` are TIMESTAMPs DuckDB prints
    `2026-11-29 20:00:00`: each partition's rows are still found under its own key (row hashes
    recorded, `verify --sources` equal), and a rewrite is still named."""
    project, warehouse = _file_project(tmp_path)
    _write_hour(project, 0, 3, style="%Y-%m-%d %H:%M")
    _write_hour(project, 1, 4, style="%Y-%m-%dT%H:%M:%S")
    run_project(project, warehouse)
    _write_hour(project, 2, 2, style="%Y-%m-%d %H:%M")
    run_project(project, warehouse, only_stale=True)
    _assert_equal_to_full(warehouse, _files(project))
    checks = verify_sources(project, warehouse)
    assert mismatch_error(checks) is None
    assert all(part.recorded[1] not in (None, "0") for check in checks for part in check.partitions)


def test_a_table_timestamp_column_is_cut_by_day(tmp_path):
    project, warehouse = _project(tmp_path, "table: raw.events")
    execute(
        warehouse,
        "CREATE SCHEMA raw",
        "CREATE TABLE raw.events (id BIGINT, amount BIGINT, hour TIMESTAMP)",
    )

    def write_day(index: int, rows: int, seed: int = 0) -> None:
        execute(
            warehouse,
            "INSERT INTO raw.events SELECT ? * 1000 + ? * 100 + range, (range * 7 + ?) % 13, "
            "TIMESTAMP '2026-11-29 00:00:00' + to_days(?) + to_minutes(range * 37) FROM range(?)",
            params=[index, seed, seed, index, rows],
        )

    for index in range(2):
        write_day(index, 5)
    run_project(project, warehouse)
    _assert_equal_to_full(warehouse, "raw.events")
    write_day(2, 4)
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("events_log").path == "delta"
    _assert_equal_to_full(warehouse, "raw.events")
    assert mismatch_error(verify_sources(project, warehouse)) is None
    execute(warehouse, "UPDATE raw.events SET amount = amount + 1 WHERE id = 1000")  # a consumed day
    execute(warehouse, "INSERT INTO raw.events VALUES (99, 1, TIMESTAMP '2026-11-30 12:00:00')")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert (caught.value.code, caught.value.subject) == ("E052", "events/2026-11-30")


def test_a_timestamp_layout_duckdb_types_as_text_is_e050_at_compile(tmp_path):
    """DuckDB's own `PARTITION_BY (hour)` writes `hour=2026-11-29%2020%3A00%3A00/`, which its hive
    partitioning types VARCHAR: not totally ordered, so a coded error naming the type."""
    project, warehouse = _file_project(tmp_path)
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT range AS id, range AS amount, TIMESTAMP '{FIRST_HOUR}' + to_hours(range % 2) AS hour "
            f"FROM range(4)) TO '{project / 'events'}' (FORMAT parquet, PARTITION_BY (hour))"
        )
    finally:
        con.close()
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E050"
    assert "VARCHAR" in caught.value.message


# Each run: the hours arriving before it, as (rows, is_complete_now).
arrivals = st.lists(
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=0, max_size=3), min_size=2, max_size=3
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=arrivals)
def test_over_random_hourly_arrivals_every_model_equals_a_full_recompute(tmp_path_factory, steps):
    """Hours arrive (some still being written) across midnight: after every run the append model,
    the day-partitioned aggregate and the unpartitioned one equal a full recompute over the hours
    consumed (the last complete hour before the first incomplete one)."""
    project, warehouse = _file_project(tmp_path_factory.mktemp("hours"), "  complete_when: '_SUCCESS'")
    _write_hour(project, 0, 3, marker=True)
    index, waiting, complete = 1, [], [0]
    for step in steps:
        for folder in waiting:  # the writer finishes what it started
            (_folder(project, folder) / "_SUCCESS").write_text("")
            complete.append(folder)
        waiting = []
        for rows, is_complete in step:
            _write_hour(project, index, rows, marker=is_complete)
            (complete if is_complete else waiting).append(index)
            index += 2  # hours 20:00, 22:00, 00:00...: arrivals cross midnight
        run_project(project, warehouse)
        frontier = 0
        for folder in sorted([*complete, *waiting]):
            if folder in waiting:
                break
            frontier = folder
        _assert_equal_to_full(warehouse, _files(project), last=hour(frontier))
