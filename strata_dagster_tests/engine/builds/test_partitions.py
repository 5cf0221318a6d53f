"""Partition-complete builds (docs/architecture.md, R6): affected partitions only, each recomputed
completely."""

import datetime as dt

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata_dagster.backends.opening import open_session
from strata_dagster.engine.context import load_context
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, edit_module, sql
from strata_dagster_tests.support.helpers import compile_text
from strata_dagster_tests.support.partition_support import compare, make_project

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)

START = dt.datetime(2026, 1, 1)


@pytest.fixture
def orders(tmp_path):
    project, warehouse = make_project(tmp_path)
    # 90 days x 40 orders, deterministic; updated_at = order_ts.
    sql(
        warehouse,
        "INSERT INTO raw.orders SELECT range, ? + to_minutes(range * 36), ? + to_minutes(range * 36), "
        "CASE WHEN range % 11 = 0 THEN 'cancelled' ELSE 'paid' END, CASE WHEN range % 3 = 0 THEN 'web' ELSE 'shop' END, "
        "(range % 50) + 0.5 FROM range(3600)",
        [START, START],
    )
    return project, warehouse


def equal_to_full(warehouse):
    con = duckdb.connect(str(warehouse))
    try:
        return {model: compare(con, model) for model in ("daily", "monthly", "by_ts")}
    finally:
        con.close()


ALL_EQUAL = {model: {"rows": 0, "groups": 0, "totals": True} for model in ("daily", "monthly", "by_ts")}


def test_late_updates_to_old_days_rebuild_exactly_those_partitions(orders):
    """R6 (docs/architecture.md): late updates to February 1-16 after the cutoff lose no row in day or month models."""
    project, warehouse = orders
    run_project(project, warehouse)
    now = sql(warehouse, "SELECT max(updated_at) FROM raw.orders")[0][0]
    sql(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 100, updated_at = ? + INTERVAL 1 HOUR "
        "WHERE order_ts >= '2026-02-01' AND order_ts < '2026-02-17' AND order_id % 17 = 0",
        [now],
    )
    result = run_project(project, warehouse, only_stale=True)
    daily = result.outcome("daily")
    assert daily.path == "partitions"
    assert daily.detail["partitions"] == [f"2026-02-{day:02d}" for day in range(1, 17)]
    assert daily.detail["partitions_total"] == 90
    monthly = result.outcome("monthly")
    assert monthly.path == "partitions" and monthly.detail["partitions"] == ["2026-02-01"]
    assert equal_to_full(warehouse) == ALL_EQUAL
    # February is whole: every day of it is still there.
    assert sql(warehouse, "SELECT days FROM main.v_monthly WHERE order_month = '2026-02-01'") == [(28,)]


def test_the_recompute_reads_the_affected_days_as_ranges_of_the_raw_column(orders):
    """Days cut from a TIMESTAMP (directly, or through `let d = cast(ts as date)`) are also read as
    ranges of that column, consecutive days as one range, so DuckDB skips other row groups. A few
    ranges select exactly the days' rows: no key match beside them."""
    project, warehouse = orders
    run_project(project, warehouse)
    sql(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} "
        "WHERE order_ts >= '2026-02-01' AND order_ts < '2026-02-04' OR order_ts::DATE = '2026-03-10'",
    )
    result = run_project(project, warehouse, only_stale=True)
    for name in ("daily", "by_ts"):
        segment_sql = result.outcome(name).detail["segment_sql"]
        assert (
            "orders.order_ts >= CAST('2026-02-01' AS TIMESTAMP) AND orders.order_ts < CAST('2026-02-04' AS TIMESTAMP)"
            in segment_sql
        ), name
        assert (
            "orders.order_ts >= CAST('2026-03-10' AS TIMESTAMP) AND orders.order_ts < CAST('2026-03-11' AS TIMESTAMP)"
            in segment_sql
        ), name
        assert "IN (SELECT" not in segment_sql, name
    assert "CAST('2026-02-01' AS TIMESTAMP)" not in result.outcome("monthly").detail["segment_sql"]
    assert equal_to_full(warehouse) == ALL_EQUAL


def test_many_scattered_days_are_read_as_one_span_and_matched_by_key(orders):
    """Past MAX_EXACT_RANGES runs of days, the recompute reads one span of the raw column (for
    pruning) and matches the days' keys beside it: a per-row OR of many ranges costs more."""
    from strata_dagster.sql.segments import MAX_EXACT_RANGES

    project, warehouse = orders
    run_project(project, warehouse)
    days = MAX_EXACT_RANGES + 2  # every third day from 2026-01-05: as many runs
    sql(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} "
        f"WHERE order_ts >= '2026-01-05' AND (order_ts::DATE - DATE '2026-01-05') % 3 = 0 "
        f"AND order_ts < DATE '2026-01-05' + INTERVAL {3 * days} DAY",
    )
    result = run_project(project, warehouse, only_stale=True)
    for name in ("daily", "by_ts"):
        assert len(result.outcome(name).detail["partitions"]) == days, name
        segment_sql = result.outcome(name).detail["segment_sql"]
        last = dt.date(2026, 1, 5) + dt.timedelta(days=3 * (days - 1) + 1)
        assert (
            "orders.order_ts >= CAST('2026-01-05' AS TIMESTAMP) AND "
            f"orders.order_ts < CAST('{last.isoformat()}' AS TIMESTAMP)"
        ) in segment_sql, name
        assert "IN (SELECT" in segment_sql, name  # the exact match
    assert equal_to_full(warehouse) == ALL_EQUAL


def test_a_row_updated_out_of_the_filter_refreshes_its_partition(orders):
    project, warehouse = orders
    run_project(project, warehouse)
    sql(
        warehouse,
        "UPDATE raw.orders SET status = 'cancelled', updated_at = updated_at + INTERVAL 300 DAY WHERE order_id = 1",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("daily").detail["partitions"] == ["2026-01-01"]
    assert equal_to_full(warehouse) == ALL_EQUAL


def test_a_row_moving_between_days_refreshes_both(orders):
    project, warehouse = orders
    run_project(project, warehouse)
    sql(
        warehouse,
        f"UPDATE raw.orders SET order_ts = order_ts + INTERVAL 40 DAY, {ADVANCE_UPDATED_AT} WHERE order_id = 2",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("daily").detail["partitions"] == ["2026-01-01", "2026-02-10"]
    assert result.outcome("by_ts").detail["partitions"] == ["2026-01-01", "2026-02-10"]
    assert equal_to_full(warehouse) == ALL_EQUAL


def test_deleting_a_whole_day_removes_its_partition(orders):
    project, warehouse = orders
    run_project(project, warehouse)
    sql(warehouse, "DELETE FROM raw.orders WHERE CAST(order_ts AS DATE) = '2026-01-05'")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("daily").detail["partitions"] == ["2026-01-05"]
    assert sql(warehouse, "SELECT count(*) FROM main.v_daily WHERE order_day = '2026-01-05'") == [(0,)]
    assert equal_to_full(warehouse) == ALL_EQUAL


def test_unaffected_partitions_keep_their_segments(orders):
    project, warehouse = orders
    first = run_project(project, warehouse)
    sql(warehouse, f"UPDATE raw.orders SET amount = 1, {ADVANCE_UPDATED_AT} WHERE order_id = 3")
    second = run_project(project, warehouse, only_stale=True)
    segments = sql(
        warehouse,
        "SELECT snapshot_ids FROM strata.publications WHERE model = 'daily' ORDER BY entry DESC LIMIT 1",
    )[0][0]
    assert segments == [first.outcome("daily").snapshot_id, second.outcome("daily").snapshot_id]
    assert second.outcome("daily").detail["rows_merged"] == 2  # one day, two channels
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_an_edit_that_does_not_advance_updated_at_is_not_seen_unless_versioning_is_full(orders):
    """`versioning: cdc(updated_at)` fingerprints the change column (per partition too): by the
    cdc contract an edit without it changes nothing. With `versioning: full` the same edit
    refreshes exactly its day and month."""
    project, warehouse = orders
    run_project(project, warehouse)
    sql(warehouse, "UPDATE raw.orders SET amount = 7 WHERE order_id = 3")
    assert run_project(project, warehouse, only_stale=True).is_noop
    edit_module(project / "orders.strata", "versioning: cdc(updated_at)", "versioning: full")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("daily").path == "partitions"  # other basis: every day compared, one differs
    assert result.outcome("daily").detail["partitions"] == sorted(
        {
            row[0].isoformat()
            for row in sql(warehouse, "SELECT DISTINCT CAST(order_ts AS DATE) FROM raw.orders")
        }
    )
    assert equal_to_full(warehouse) == ALL_EQUAL
    sql(warehouse, "UPDATE raw.orders SET amount = 8 WHERE order_id = 3")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("daily").detail["partitions"] == ["2026-01-01"]
    assert result.outcome("monthly").detail["partitions"] == ["2026-01-01"]
    assert equal_to_full(warehouse) == ALL_EQUAL


def test_a_cdc_column_the_table_lacks_is_a_clear_error(orders):
    project, warehouse = orders
    edit_module(project / "orders.strata", "cdc(updated_at)", "cdc(changed_at)")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E012"
    assert (
        "`versioning: cdc(changed_at)`" in caught.value.message
        and "no column `changed_at`" in caught.value.message
    )
    assert caught.value.location is not None and caught.value.location.file.endswith("orders.strata")
    assert sql(
        warehouse, "SELECT count(*) FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"
    ) == [(0,)]


def test_window_functions_make_partitions_rebuild_fully(tmp_path):
    project, warehouse = make_project(tmp_path)
    (project / "ranked.strata").write_text(
        "model ranked {\n  from orders\n  let d = cast(order_ts as date)\n"
        "  derive rank_in_day = row_number() over (partition by channel order by amount, order_id)\n"
        "  partitioned_by: day(d)\n}\n"
    )
    sql(
        warehouse,
        "INSERT INTO raw.orders VALUES (1, ?, ?, 'paid', 'web', 1), (2, ? + INTERVAL 1 DAY, ?, 'paid', 'web', 2)",
        [START] * 4,
    )
    run_project(project, warehouse)
    sql(warehouse, f"UPDATE raw.orders SET amount = 5, {ADVANCE_UPDATED_AT} WHERE order_id = 1")
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("ranked").path == "full"
    assert "window function" in result.outcome("ranked").detail["full_reason"]


def test_partition_column_must_be_an_output_column():
    with pytest.raises(StrataError) as caught:
        compile_text(
            "model m {\n  from orders\n  group channel\n  aggregate n = count(*)\n  partitioned_by: day(order_ts)\n}\n"
        )
    assert caught.value.code == "E010"


def test_grouped_source_scan_gives_the_whole_table_fingerprint(orders):
    from strata_dagster.backends.opening import open_session
    from strata_dagster.engine.builds.partitions import raw_partition_of
    from strata_dagster.engine.context import load_context
    from strata_dagster.engine.sources.readings import read_source_state, read_source_state_by_group

    project, warehouse = orders
    with open_session(warehouse) as session:
        context = load_context(session, project, {})
        model = context.project.models["daily"]
        key = raw_partition_of(model, context.compiled.models["daily"])
        grouped, groups = read_source_state_by_group(session, context, "orders", key)
        assert grouped == read_source_state(session, context, "orders")
        assert len(groups()) == 90


def test_partition_ranges_merge_consecutive_months_across_a_year_and_keep_the_null_partition():
    from sqlglot import exp

    from strata_dagster.sql.segments import partition_ranges

    keys = ["2025-11-01", "2025-12-01", "2026-01-01", "2026-03-01"]
    ranges = partition_ranges(exp.column("d"), "DATE", "month", keys, has_null=True)
    assert ranges.is_exact
    assert ranges.predicate.sql(dialect="duckdb") == (
        "(d >= CAST('2025-11-01' AS DATE) AND d < CAST('2026-02-01' AS DATE)) "
        "OR (d >= CAST('2026-03-01' AS DATE) AND d < CAST('2026-04-01' AS DATE)) OR d IS NULL"
    )


@settings(max_examples=60, deadline=None)
@given(
    days=st.sets(st.integers(0, 59), min_size=1, max_size=40),
    grain=st.sampled_from(["day", "month"]),
    type_name=st.sampled_from(["DATE", "TIMESTAMP"]),
    has_null=st.booleans(),
)
def test_partition_ranges_select_exactly_the_partitions_rows_or_say_they_only_prune(
    days, grain, type_name, has_null
):
    """Over rows every few hours of 60 days (and NULLs), an exact predicate selects exactly the
    rows whose day or month is asked for; past MAX_EXACT_RANGES runs it is a span that keeps
    every such row (the build then matches the keys too)."""
    from sqlglot import exp

    from strata_dagster.sql.segments import MAX_EXACT_RANGES, partition_ranges

    start = dt.date(2025, 11, 20)
    asked = {start + dt.timedelta(days=day) for day in days}
    if grain == "month":
        asked = {day.replace(day=1) for day in asked}
    keys = sorted(day.isoformat() for day in asked)
    ranges = partition_ranges(exp.column("t"), type_name, grain, keys, has_null=has_null)
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE r AS SELECT CAST(TIMESTAMP '2025-11-15' + to_hours(h * 5) AS {type_name}) AS t "
        "FROM range(0, 350) AS s(h) UNION ALL SELECT NULL"
    )
    trunc = "CAST(t AS DATE)" if grain == "day" else "CAST(date_trunc('month', t) AS DATE)"
    key_list = ", ".join(f"DATE '{key}'" for key in keys)
    wanted = f"({trunc} IN ({key_list}){' OR t IS NULL' if has_null else ''})"
    picked = ranges.predicate.sql(dialect="duckdb")
    missed, extra = con.execute(
        f"SELECT count(*) FILTER (WHERE {wanted} AND NOT coalesce({picked}, false)), "
        f"count(*) FILTER (WHERE coalesce({picked}, false) AND NOT {wanted}) FROM r"
    ).fetchone()
    assert missed == 0
    runs = len(list(ranges.predicate.flatten())) if isinstance(ranges.predicate, exp.Or) else 1
    if ranges.is_exact:
        assert extra == 0
        assert runs - int(has_null) <= MAX_EXACT_RANGES
    else:
        assert runs == 1 + int(has_null)


def compiled_sql(project, warehouse) -> dict[str, str]:
    with open_session(warehouse) as session:
        context = load_context(session, project, {})
        return {name: model.sql() for name, model in context.compiled.models.items()}


def test_runs_leave_the_parsed_project_as_they_found_it(orders):
    """Within one process a project's parsed modules are reused, and builds render their own trees
    without sqlglot's defensive copy: full, partition and no-change runs must change no shared
    tree, so the model SQL compiled after them equals the SQL compiled before."""
    project, warehouse = orders
    run_project(project, warehouse)
    before = compiled_sql(project, warehouse)
    sql(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1, " + ADVANCE_UPDATED_AT + " WHERE order_id % 97 = 0",
    )
    assert run_project(project, warehouse, only_stale=True).outcome("daily").path == "partitions"
    assert run_project(project, warehouse, only_stale=True).is_noop
    assert compiled_sql(project, warehouse) == before
    assert equal_to_full(warehouse) == ALL_EQUAL
