"""Volatile models (now(), current_date, random(), ...): detected at compile time (W002), rebuilt on
every run or once per `refresh:` period, with early cutoff when their rows did not change."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.compile.determinism import effective_refresh, volatile_calls
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.fingerprint.refresh import is_refresh_due, refresh_period
from strata_dagster_tests.engine.builds import test_partition_properties as partition_properties
from strata_dagster_tests.support.engine_support import make_module_project, row_multiset
from strata_dagster_tests.support.helpers import compile_text

JOIN_ON_CLOCK = (
    "join left customers on orders.customer_id = customers.customer_id and signup_date < today()\n"
    "  select order_id, signup_date"
)


@pytest.mark.parametrize(
    ("step", "call", "line", "column"),
    [
        ("filter order_ts > now() - interval 1 day", "NOW()", 3, 21),
        ("let age = current_date - cast(order_ts as date)", "CURRENT_DATE", 3, 13),
        ("derive sample = random() < 0.5", "RANDOM()", 3, 19),
        ("derive id = gen_random_uuid()", "UUID()", 3, 15),
        ("derive id = uuid()", "UUID()", 3, 15),
        ("derive at = current_timestamp", "CURRENT_TIMESTAMP", 3, 15),
        ("derive at = get_current_timestamp()", "GET_CURRENT_TIMESTAMP()", 3, 15),
        ("derive at = current_time", "CURRENT_TIME", 3, 15),
        ("derive n = nextval('ids')", "NEXTVAL('ids')", 3, 14),
        ("select order_id, epoch(now()) as at", "NOW()", 3, 26),
        (JOIN_ON_CLOCK, "CURRENT_DATE", 3, 87),
    ],
)
def test_volatile_call_warns_w002_at_the_call(step, call, line, column):
    compiled = compile_text(f"model m {{\n  from orders\n  {step}\n}}\n")
    assert [warning.code for warning in compiled.warnings] == ["W002"]
    warning = compiled.warnings[0]
    assert call in warning.message
    assert (warning.location.file, warning.location.line, warning.location.column) == (
        "m.strata",
        line,
        column,
    )
    assert "refresh: daily" in warning.hint
    assert warning.render().startswith("warning[W002]: ")
    assert effective_refresh(compiled.project.models["m"]) == "always"


@pytest.mark.parametrize(
    "step",
    [
        "filter status = 'now()'",  # a string, not a call
        "derive now = order_ts",  # a column named like a function
        "derive d = date_trunc('day', order_ts)",
        "filter order_ts > TIMESTAMP '2025-01-01'",
        "derive r = hash(order_id)",
    ],
)
def test_deterministic_model_has_no_volatile_call(step):
    compiled = compile_text(f"model m {{\n  from orders\n  {step}\n}}\n")
    assert compiled.warnings == ()
    assert volatile_calls(compiled.project.models["m"]) == ()
    assert effective_refresh(compiled.project.models["m"]) is None


def test_declared_refresh_silences_w002_and_is_the_effective_refresh():
    compiled = compile_text("model m {\n  from orders\n  filter order_ts > now()\n  refresh: daily\n}\n")
    assert compiled.warnings == ()
    assert effective_refresh(compiled.project.models["m"]) == "daily"


def test_refresh_on_a_deterministic_model_is_allowed():
    compiled = compile_text("model m {\n  from orders\n  refresh: hourly\n}\n")
    assert compiled.warnings == ()
    assert effective_refresh(compiled.project.models["m"]) == "hourly"


def test_downstream_of_a_volatile_model_is_not_volatile_itself():
    compiled = compile_text("model m {\n  from orders\n  derive r = random()\n}\nmodel d {\n  from m\n}\n")
    assert [warning.code for warning in compiled.warnings] == ["W002"]
    assert effective_refresh(compiled.project.models["d"]) is None


@pytest.mark.parametrize(
    ("value", "column"),
    [("weekly", 12), ("'daily'", 12), ("Daily", 12), ("[daily]", 12)],
)
def test_refresh_value_errors_are_e007(value, column):
    with pytest.raises(StrataError) as caught:
        compile_text(f"model m {{\n  from orders\n  refresh: {value}\n}}\n")
    error = caught.value.errors[0]
    assert error.code == "E007"
    assert (error.location.line, error.location.column) == (3, column)
    assert "refresh: daily" in error.hint


def test_refresh_without_a_value_is_e007():
    with pytest.raises(StrataError) as caught:
        compile_text("model m {\n  from orders\n  refresh\n}\n")
    assert caught.value.errors[0].code == "E007"


def test_refresh_periods_are_utc_hours_and_days():
    at = dt.datetime(2026, 3, 1, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-2)))  # 01:30 UTC, Mar 2
    assert refresh_period("daily", at) == "daily:2026-03-02"
    assert refresh_period("hourly", at) == "hourly:2026-03-02T01"
    assert refresh_period("always", at) is None and refresh_period(None, at) is None
    built = dt.datetime(2026, 3, 2, 1, 0)
    assert not is_refresh_due("daily", built, at)
    assert not is_refresh_due("hourly", built, at)
    assert is_refresh_due("hourly", built, dt.datetime(2026, 3, 2, 2, 0))
    assert is_refresh_due("always", built, at) and is_refresh_due("daily", None, at)
    assert not is_refresh_due(None, built, dt.datetime(2030, 1, 1))


# -- the engine ------------------------------------------------------------------------------------

MODULE = """
source events {
  table: raw.events
}

model sampled {
  from events
  derive r = random()
  REFRESH
}

model clocked {
  from events
  filter ts <= now()
}

model counted {
  from clocked
  group kind
  aggregate n = count(*)
}

model plain {
  from events
}
"""
DAY = dt.datetime(2026, 3, 2, 10, 15, tzinfo=dt.timezone.utc)


def events_project(root, refresh=""):
    return make_module_project(
        root,
        "events.strata",
        MODULE.replace("REFRESH", refresh),
        "CREATE TABLE raw.events AS SELECT range AS id, ['a', 'b'][range % 2 + 1] AS kind, "
        "TIMESTAMP '2025-01-01' + to_minutes(range) AS ts FROM range(20)",
    )


def paths(result):
    return {outcome.model: outcome.path for outcome in result.outcomes}


def test_volatile_model_is_rebuilt_on_every_only_stale_run(tmp_path):
    project, warehouse = events_project(tmp_path)
    first = run_project(project, warehouse, now=DAY)
    second = run_project(project, warehouse, only_stale=True, now=DAY)
    assert not second.is_noop
    outcome = paths(second)
    assert outcome["plain"] == "reused"
    # random() gave new rows: a new snapshot; now() filtered the same rows: early cutoff.
    assert outcome["sampled"] == "full"
    assert second.outcome("sampled").snapshot_id != first.outcome("sampled").snapshot_id
    assert second.outcome("sampled").detail["refresh"] == "always"
    assert outcome["clocked"] == "cutoff"
    assert second.outcome("clocked").snapshot_id == first.outcome("clocked").snapshot_id
    # Early cutoff: what reads the unchanged volatile model is not rebuilt for its sake.
    assert outcome["counted"] == "reused"


def test_refresh_daily_reuses_within_the_utc_day(tmp_path):
    project, warehouse = events_project(tmp_path, "refresh: daily")
    first = run_project(project, warehouse, models=["sampled"], now=DAY)
    late = run_project(
        project, warehouse, models=["sampled"], only_stale=True, now=DAY.replace(hour=23, minute=59)
    )
    assert late.is_noop and paths(late) == {"sampled": "reused"}
    rows = row_multiset(warehouse, "main.v_sampled")
    next_day = run_project(
        project, warehouse, models=["sampled"], only_stale=True, now=DAY + dt.timedelta(days=1)
    )
    assert paths(next_day) == {"sampled": "full"}
    assert next_day.outcome("sampled").detail["period"] == "daily:2026-03-03"
    assert next_day.outcome("sampled").snapshot_id != first.outcome("sampled").snapshot_id
    assert row_multiset(warehouse, "main.v_sampled") != rows


def test_refresh_hourly_reuses_within_the_utc_hour(tmp_path):
    project, warehouse = events_project(tmp_path, "refresh: hourly")
    run_project(project, warehouse, models=["sampled"], now=DAY)
    same_hour = run_project(
        project, warehouse, models=["sampled"], only_stale=True, now=DAY.replace(minute=59)
    )
    assert paths(same_hour) == {"sampled": "reused"}
    next_hour = run_project(project, warehouse, models=["sampled"], only_stale=True, now=DAY.replace(hour=11))
    assert paths(next_hour) == {"sampled": "full"}


def test_refresh_always_rebuilds_without_a_warning(tmp_path):
    project, warehouse = events_project(tmp_path, "refresh: always")
    run_project(project, warehouse, models=["sampled"], now=DAY)
    again = run_project(project, warehouse, models=["sampled"], only_stale=True, now=DAY)
    assert paths(again) == {"sampled": "full"}


PARTITIONED = """
source events {
  table: raw.events
}

model daily_sample {
  from events
  let day = cast(ts as date)
  derive r = random()
  partitioned_by: day(day)
  refresh: daily
}
"""


def test_refreshed_partitioned_volatile_model_is_rebuilt_completely(tmp_path):
    """A delta would recompute no partition (no input changed) and keep rows drawn on another day;
    a full rebuild draws them all again, as a rebuild from scratch would."""
    project, warehouse = make_module_project(
        tmp_path,
        "events.strata",
        PARTITIONED,
        "CREATE TABLE raw.events AS SELECT range AS id, TIMESTAMP '2025-01-01' + to_hours(range * 7) AS ts "
        "FROM range(30)",
    )
    run_project(project, warehouse, now=DAY)
    rows = row_multiset(warehouse, "main.v_daily_sample")
    same_day = run_project(project, warehouse, only_stale=True, now=DAY.replace(hour=20))
    assert same_day.is_noop
    next_day = run_project(project, warehouse, only_stale=True, now=DAY + dt.timedelta(days=1))
    outcome = next_day.outcome("daily_sample")
    assert outcome.path == "full"
    assert "volatile" in outcome.detail["full_reason"]
    assert row_multiset(warehouse, "main.v_daily_sample") != rows


def test_strata_check_prints_w002_with_the_call_position_and_succeeds(tmp_path):
    from click.testing import CliRunner

    from strata_dagster.cli.main import main

    project, warehouse = events_project(tmp_path, "refresh: daily")
    result = CliRunner().invoke(main, ["check", str(project), "--warehouse", str(warehouse)])
    assert result.exit_code == 0, result.output
    printed = result.output + (result.stderr if hasattr(result, "stderr") else "")
    assert "warning[W002]: model `clocked` calls `NOW()`" in printed
    assert "events.strata:14:16" in printed  # `filter ts <= now()`: the call, not the model
    assert "refresh: daily" in printed
    assert "model `sampled`" not in printed  # it declares its refresh


UPSERT = """
source events {
  table: raw.events
}

model clocked_upsert {
  from events
  filter ts <= now()
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: ts
}

model reader {
  from clocked_upsert
}
"""


def test_unchanged_rows_of_a_volatile_upsert_model_keep_its_snapshot(tmp_path):
    """Always rebuilt fully, yet early cutoff: the same rows keep the snapshot, and its reader."""
    project, warehouse = make_module_project(
        tmp_path,
        "events.strata",
        UPSERT,
        "CREATE TABLE raw.events AS SELECT range AS id, TIMESTAMP '2025-01-01' + to_minutes(range) AS ts "
        "FROM range(20)",
    )
    first = run_project(project, warehouse, now=DAY)
    again = run_project(project, warehouse, only_stale=True, now=DAY)
    assert paths(again) == {"clocked_upsert": "cutoff", "reader": "reused"}
    assert again.outcome("clocked_upsert").snapshot_id == first.outcome("clocked_upsert").snapshot_id


# -- property: volatile incremental models equal a full rebuild -----------------------------------

VOLATILE_INCREMENTAL = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}

model recent_daily {
  from orders
  filter order_ts >= now() - interval 36500 day
  let order_day = cast(order_ts as date)
  group order_day, channel
  aggregate revenue = sum(amount), n = count(*)
  partitioned_by: day(order_day)
  refresh: daily
}

model recent_upsert {
  from orders
  filter order_ts >= now() - interval 36500 day and status <> 'cancelled'
  select order_id, order_ts, updated_at, amount
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}
"""
VOLATILE_FULL = {
    "recent_daily": "SELECT CAST(order_ts AS DATE) AS order_day, channel, sum(amount) AS revenue, count(*) AS n "
    "FROM raw.orders WHERE order_ts >= now() - INTERVAL 36500 DAY GROUP BY ALL",
    "recent_upsert": "SELECT order_id, order_ts, updated_at, amount FROM raw.orders "
    "WHERE order_ts >= now() - INTERVAL 36500 DAY AND status <> 'cancelled'",
}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    history=st.lists(st.tuples(partition_properties.steps, st.sampled_from([0, 1])), min_size=1, max_size=3)
)
def test_volatile_incremental_models_equal_a_full_rebuild(tmp_path_factory, history):
    """Random edits, runs in the same UTC day (reused or rebuilt on changed input) or the next one
    (the refresh period passed): the live views equal a full rebuild, compared by row-hash multisets."""
    project, warehouse = make_module_project(
        tmp_path_factory.mktemp("volatile"),
        "orders.strata",
        VOLATILE_INCREMENTAL,
        "CREATE TABLE raw.orders AS SELECT range AS order_id, TIMESTAMP '2026-01-01' + to_minutes(range * 360) AS "
        "order_ts, TIMESTAMP '2026-01-01' + to_minutes(range * 360) AS updated_at, CASE WHEN range % 7 = 0 THEN "
        "'cancelled' ELSE 'paid' END AS status, CASE WHEN range % 2 = 0 THEN 'web' ELSE 'shop' END AS channel, "
        "CAST(range % 40 + 1 AS DECIMAL(12, 2)) AS amount FROM range(150)",
    )
    now = DAY
    run_project(project, warehouse, now=now)
    clock = 0
    for steps, days in history:
        con = duckdb.connect(str(warehouse))
        for step in steps:
            clock += 1
            partition_properties.apply(con, step, clock)
        con.close()
        now += dt.timedelta(days=days)
        result = run_project(project, warehouse, only_stale=True, now=now)
        for model, full in VOLATILE_FULL.items():
            assert row_multiset(warehouse, f"main.v_{model}") == row_multiset(warehouse, f"({full})"), (
                model,
                steps,
                result.outcome(model),
            )
