"""`--partitions`: a run or backfill rebuilds exactly the named partitions of the selected
partitioned models from their current inputs, records them in the history, and leaves every other
partition as it was (stale ones are still found by the next build). Downstream models follow the
usual rules; anything that is not a partition of the model is E040."""

import datetime as dt
import json
import shutil

import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.backends.opening import open_session
from strata_dagster.cli.main import main
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import edit_module, execute, make_module_project
from strata_dagster_tests.support.partition_range_support import (
    change_day,
    day,
    full_days,
    live_days,
    make_range_project,
)
from strata_dagster_tests.support.partition_support import compare

NOW = dt.datetime(2026, 3, 15, 12)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    project, warehouse = make_range_project(tmp_path_factory.mktemp("ranges"))
    run_project(project, warehouse, now=NOW)
    return project, warehouse


@pytest.fixture
def built(template, tmp_path):
    """A copy of the built project and its warehouse."""
    project, warehouse = template
    shutil.copytree(project, tmp_path / "project")
    shutil.copy(warehouse, tmp_path / warehouse.name)
    return tmp_path / "project", tmp_path / warehouse.name


def invoke(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


def segment_days(warehouse, table_name) -> list[str]:
    rows = execute(
        warehouse, f"SELECT DISTINCT CAST(order_day AS VARCHAR) FROM strata_snapshots.{table_name} ORDER BY 1"
    )
    return [row[0] for row in rows]


def test_a_range_rebuilds_exactly_its_partitions_and_the_next_build_the_stale_others(built):
    project, warehouse = built
    change_day(warehouse, day(3), is_silent=True)  # invisible to change detection: only a rebuild sees it
    change_day(warehouse, day(20))  # a visible change outside the range
    before = live_days(warehouse)

    result = run_project(project, warehouse, models=["daily"], partitions=[f"{day(2)}..{day(4)}"], now=NOW)

    outcome = result.outcome("daily")
    assert outcome.path == "partitions"
    assert outcome.detail["partitions"] == [day(2), day(3), day(4)]
    assert outcome.detail["requested_partitions"] == [day(2), day(3), day(4)]
    # Recomputed days whose rows did not change keep their live segment (per-partition cutoff):
    # the new segment holds the one day that changed.
    assert outcome.detail["partitions_unchanged"] == 2
    assert segment_days(warehouse, outcome.table_name) == [day(3)]
    live, full = live_days(warehouse), full_days(warehouse)
    assert live[day(3)] == full[day(3)] != before[day(3)]
    assert {key: rows for key, rows in live.items() if key not in (day(2), day(3), day(4))} == {
        key: rows for key, rows in before.items() if key not in (day(2), day(3), day(4))
    }
    assert live[day(20)] != full[day(20)]  # not asked for: still as before, and still stale

    again = run_project(project, warehouse, only_stale=True, now=NOW)
    assert again.outcome("daily").detail["partitions"] == [day(20)]
    con = duckdb.connect(str(warehouse))
    try:
        assert compare(con, "daily") == {"rows": 0, "groups": 0, "totals": True}
        assert compare(con, "monthly") == {"rows": 0, "groups": 0, "totals": True}
    finally:
        con.close()


def test_a_range_over_unchanged_rows_keeps_the_snapshot_and_downstream_does_not_rebuild(built):
    project, warehouse = built
    before = run_project(project, warehouse, only_stale=True, now=NOW)
    assert before.is_noop

    result = run_project(project, warehouse, models=["daily+"], partitions=[f"{day(5)},{day(40)}"], now=NOW)

    daily, monthly = result.outcome("daily"), result.outcome("monthly")
    assert (daily.path, daily.is_published) == ("cutoff", False)
    assert daily.detail["requested_partitions"] == [day(5), day(40)]
    assert (monthly.path, monthly.is_published) == ("cutoff", False)
    assert not monthly.detail.get("partitions")


def test_a_range_whose_rows_are_equal_does_not_hide_a_change_elsewhere(built):
    project, warehouse = built
    change_day(warehouse, day(20))

    result = run_project(project, warehouse, models=["daily"], partitions=[day(5)], now=NOW)
    assert result.outcome("daily").path == "cutoff"

    again = run_project(project, warehouse, only_stale=True, now=NOW)
    assert again.outcome("daily").detail["partitions"] == [day(20)]
    assert live_days(warehouse) == full_days(warehouse)


def test_a_month_model_downstream_recomputes_the_months_of_the_rebuilt_days(built):
    project, warehouse = built
    change_day(warehouse, day(40), is_silent=True)

    result = run_project(project, warehouse, models=["daily+"], partitions=[day(40)], now=NOW)

    assert result.outcome("daily").detail["partitions"] == [day(40)]
    monthly = result.outcome("monthly")
    assert monthly.path == "partitions"
    assert monthly.detail["partitions"] == ["2026-02-01"]
    assert "requested_partitions" not in monthly.detail  # day keys are not a month model's
    con = duckdb.connect(str(warehouse))
    try:
        assert compare(con, "monthly") == {"rows": 0, "groups": 0, "totals": True}
    finally:
        con.close()


def test_changed_model_code_rebuilds_the_whole_model_and_says_why(built):
    project, warehouse = built
    edit_module(project / "orders.strata", "sum(amount), n = count(*)", "sum(amount * 2), n = count(*)")
    before = live_days(warehouse)

    output = invoke("run", project, "--warehouse", warehouse, "--models", "daily", "--partitions", day(3))

    assert output.exit_code == 0, output.output
    assert (
        "daily: 1 partition 2026-01-03 rebuilt with the whole model (the model's code changed"
        in output.output
    )
    assert live_days(warehouse)[day(20)] != before[day(20)]  # every partition has the new code's rows
    with open_session(warehouse, read_only=True) as session:
        entry = session.history.entries()[-1]
        (model,) = [item for item in session.history.entry_models(entry.entry) if item.model == "daily"]
    assert (model.path, model.detail["requested_partitions"]) == ("full", [day(3)])


def test_month_keys_rebuild_a_month_model(built):
    project, warehouse = built
    result = run_project(project, warehouse, models=["monthly"], partitions=["2026-01..2026-02"], now=NOW)
    assert result.outcome("monthly").detail["requested_partitions"] == ["2026-01-01", "2026-02-01"]


def test_the_range_is_recorded_in_the_history_and_printed(built):
    project, warehouse = built
    change_day(warehouse, day(10), is_silent=True)

    output = invoke(
        "run",
        project,
        "--warehouse",
        warehouse,
        "--models",
        "daily",
        "--partitions",
        f"{day(9)}..{day(11)}, {day(30)}",
    )

    assert output.exit_code == 0, output.output
    assert f"daily: 4 partitions {day(9)}..{day(11)}, {day(30)} rebuilt" in output.output
    history = invoke("history", project, "--warehouse", warehouse, "--json")
    last = json.loads(history.output)[-1]
    assert (last["kind"], last["models"], last["partitions"]) == (
        "run",
        ["daily"],
        [f"{day(9)}..{day(11)}", day(30)],
    )
    with open_session(warehouse, read_only=True) as session:
        entry = session.history.entries()[-1]
        (model,) = [item for item in session.history.entry_models(entry.entry) if item.model == "daily"]
    assert model.detail["requested_partitions"] == [day(9), day(10), day(11), day(30)]
    replay = invoke("replay", project, last["run_id"], "--warehouse", warehouse)
    assert f"partitions: {day(9)}..{day(11)}, {day(30)}" in replay.output


def test_a_backfill_with_partitions_records_its_reason_and_range(built):
    project, warehouse = built
    first = json.loads(invoke("history", project, "--warehouse", warehouse, "--json").output)[-1]["run_id"]
    change_day(warehouse, day(12), is_silent=True)

    output = invoke(
        "backfill", project, first, "--warehouse", warehouse, "--models", "daily",
        "--partitions", day(12), "--reason", "orders of the 12th were rewritten in place",
    )  # fmt: skip

    assert output.exit_code == 0, output.output
    assert f"daily: 1 partition {day(12)} rebuilt" in output.output
    last = json.loads(invoke("history", project, "--warehouse", warehouse, "--json").output)[-1]
    assert (last["kind"], last["backfill_of"], last["reason"], last["partitions"]) == (
        "backfill",
        first,
        "orders of the 12th were rewritten in place",
        [day(12)],
    )
    assert live_days(warehouse)[day(12)] == full_days(warehouse)[day(12)]


def test_a_backfill_with_equal_rows_is_still_recorded(built):
    project, warehouse = built
    first = json.loads(invoke("history", project, "--warehouse", warehouse, "--json").output)[-1]["run_id"]
    output = invoke(
        "backfill", project, first, "--warehouse", warehouse, "--models", "daily", "--partitions", day(7),
        "--reason", "check",
    )  # fmt: skip
    assert output.exit_code == 0, output.output
    assert "rows unchanged, the snapshot stays" in output.output
    assert json.loads(invoke("history", project, "--warehouse", warehouse, "--json").output)[-1][
        "partitions"
    ] == [day(7)]


ERRORS = [
    (["daily"], "2026-13-01", "neither a day, a month nor a range"),
    (["daily"], "2026/01/01", "neither a day, a month nor a range"),
    (["daily"], "2026-01-05..", "neither a day, a month nor a range"),
    (["daily"], "2026-01-09..2026-01-02", "ends before it starts"),
    (["daily"], "2026-01..2026-01-05", "mixes a month and a day"),
    (["daily"], "2026-01", "no selected model is partitioned by month"),
    (["monthly"], "2026-01-05", "no selected model is partitioned by day"),
    (["daily"], "2025-12-31", "lies before the partitions of model `daily`"),
    (["daily"], "2026-03-16", "in the future beyond the data"),
    (["monthly"], "2026-04", "in the future beyond the data"),
    (["daily"], "9999-12-31", "reaches the last day a date can hold"),
    (["monthly"], "9999-12", "reaches the last day a date can hold"),
    (["daily"], "2026-02-01..9999-12-30", "in the future beyond the data"),
    (["order_amounts"], "2026-01-05", "no selected model is partitioned"),
]


@pytest.mark.parametrize(
    ("models", "partitions", "needle"), ERRORS, ids=[case[1] + "-" + case[0][0] for case in ERRORS]
)
def test_what_is_no_partition_of_the_model_is_e040_and_nothing_is_written(built, models, partitions, needle):
    project, warehouse = built
    with open_session(warehouse, read_only=True) as session:
        entries = len(session.history.entries())
    with pytest.raises(StrataError) as raised:
        run_project(project, warehouse, models=models, partitions=[partitions], now=NOW)
    assert raised.value.code == "E040"
    assert needle in raised.value.message, raised.value.message
    with open_session(warehouse, read_only=True) as session:
        assert len(session.history.entries()) == entries


def test_the_cli_prints_e040_without_a_traceback(built):
    project, warehouse = built
    for args in (
        ["--models", "daily", "--partitions", "9999-12"],
        ["--models", "order_amounts", "--partitions", "2026-01-05"],
    ):
        output = invoke("run", project, "--warehouse", warehouse, *args)
        assert output.exit_code == 1
        assert "error[E040]" in output.output and "Traceback" not in output.output, output.output
    output = invoke(
        "backfill", project, "x", "--warehouse", warehouse, "--reason", "r", "--partitions", "2026-1-5"
    )
    # A backfill reports every error as E085, the cause's own code in its message.
    assert output.exit_code == 1 and "error[E085]: backfill cannot start (E040)" in output.output, (
        output.output
    )


STARTED_PROJECT = """
source events {
  table: raw.events
  partitioned_by: day(event_day)
  start: 2026-01-05
}

model daily_events {
  from events
  group event_day
  aggregate total = sum(amount)
  partitioned_by: day(event_day)
}
"""


def test_a_day_before_a_partitioned_sources_start_is_e040(tmp_path):
    project, warehouse = make_module_project(
        tmp_path,
        "events.strata",
        STARTED_PROJECT,
        "CREATE TABLE raw.events AS SELECT DATE '2026-01-05' + to_days(CAST(i % 20 AS INTEGER)) AS event_day, "
        "i AS amount FROM range(60) t(i)",
    )
    run_project(project, warehouse, now=NOW)
    with pytest.raises(StrataError) as raised:
        run_project(project, warehouse, partitions=["2026-01-04..2026-01-06"], now=NOW)
    assert raised.value.code == "E040"
    assert "its `start` 2026-01-05" in raised.value.message
    result = run_project(project, warehouse, partitions=["2026-01-05..2026-01-06"], now=NOW)
    assert result.outcome("daily_events").detail["requested_partitions"] == ["2026-01-05", "2026-01-06"]


def test_verify_takes_the_same_ranges(built):
    project, warehouse = built
    report = verify(
        project, warehouse, models=["daily", "monthly"], partitions=[f"{day(2)}..{day(4)}", "2026-02"]
    )
    # Days name partitions of day models and months of month models, as for `strata run`.
    assert [part.partition for part in report.model("daily").partitions] == [day(2), day(3), day(4)]
    assert [part.partition for part in report.model("monthly").partitions] == ["2026-02-01"]
    assert report.is_equal
    for text in ("9999-12", "9999-12-31", "2026-01-09..2026-01-02"):
        with pytest.raises(StrataError) as raised:
            verify(project, warehouse, partitions=[text])
        assert raised.value.code == "E040"
