"""`strata_materialize_stale` is quiet and says what it does: idle ticks launch nothing and say why,
a changed source is observed alone (in its own job, tagged `observe`), then exactly the stale
partitions are rebuilt (tagged `rebuild`, with why), and a tick while another process writes the
warehouse is skipped with E021 instead of failing or blocking the writer."""

import subprocess
import sys
import time

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster.engine.commands import operations
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.naming import UNSCOPED
from strata_dagster.orchestration.sensors import stale_sensor
from strata_dagster.orchestration.sensors.stale_sensor import (
    OBSERVE_JOB,
    RANGE_END_TAG,
    RANGE_START_TAG,
    STALE_SENSOR_NAME,
)
from strata_dagster_tests.orchestration.test_dagster_staleness import (  # noqa: F401 (events: a fixture)
    EVENTS_PROJECT,
    events,
    make_events_project,
    paid_order,
)
from strata_dagster_tests.orchestration.test_dagster_view_models import STAGED
from strata_dagster_tests.support.dagster_support import (
    change_order,
    day_keys,
    execute_assets,
    history_entries,
    launch_in_process,
    make_small_shop,
    materialize_everything,
    materialized_shop,
    order_day,
    stale_set,
)
from strata_dagster_tests.support.engine_support import edit_module, execute


@pytest.fixture
def shop(tmp_path):
    return materialized_shop(tmp_path)


class Ticks:
    """Evaluates the sensor tick after tick, carrying its cursor, as the daemon does."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
        self.defs, self.instance, self.cursor = defs, instance, None

    def __call__(self) -> dg.SensorResult:
        result = self.evaluate(self.cursor)
        # The cursor only spares work: a tick that starts from scratch requests the same runs.
        assert requests(self.evaluate(None)) == requests(result)
        self.cursor = result.cursor
        return result

    def evaluate(self, cursor: str | None) -> dg.SensorResult:
        sensor = self.defs.resolve_sensor_def(STALE_SENSOR_NAME)
        context = dg.build_sensor_context(
            instance=self.instance, repository_def=self.defs.get_repository_def(), cursor=cursor
        )
        return sensor.evaluate_tick(context)


def requests(result) -> list[tuple[str, list[str], dict[str, str]]]:
    return [(r.job_name, sorted(map(str, r.asset_selection)), dict(r.tags)) for r in result.run_requests]


def launch(defs, instance, request: dg.RunRequest) -> dg.DagsterRun:
    """Run a request as the daemon would: its job, its asset selection, its tags."""
    names = [key.to_user_string() for key in request.asset_selection]
    start = request.tags.get(RANGE_START_TAG)
    partitions = (start, request.tags[RANGE_END_TAG]) if start else None
    tags = {key: value for key, value in request.tags.items() if key not in (RANGE_START_TAG, RANGE_END_TAG)}
    run = launch_in_process(defs, instance, names, job=request.job_name, partitions=partitions, tags=tags)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    return run


def selections(result) -> list[list[str]]:
    return [
        sorted(key.to_user_string() for key in request.asset_selection) for request in result.run_requests
    ]


def test_idle_ticks_launch_nothing_and_say_why(shop):
    project, warehouse, defs, instance = shop
    tick = Ticks(defs, instance)
    runs_before = len(instance.get_runs())
    results = [tick() for _ in range(4)]
    assert all(result.run_requests == [] for result in results)
    reasons = [result.skip_message for result in results]
    assert reasons[0] == "Nothing to do: 2 sources unchanged, every asset fresh."
    # Later ticks: nothing happened in the instance, so Dagster's stale status is not recomputed.
    assert all("nothing was materialized or observed since" in reason for reason in reasons[1:])
    assert len(instance.get_runs()) == runs_before


def test_a_changed_source_is_observed_alone_then_exactly_its_stale_partitions_are_rebuilt(shop):
    project, warehouse, defs, instance = shop
    tick = Ticks(defs, instance)
    assert tick().run_requests == []  # idle, and its cursor says everything was fresh
    order = paid_order(warehouse)
    day = order_day(warehouse, order)
    change_order(warehouse, order)
    observe = tick()
    assert selections(observe) == [["orders"]]  # customers did not change
    (request,) = observe.run_requests
    assert request.job_name == OBSERVE_JOB
    assert request.tags[c.PURPOSE_TAG] == c.PURPOSE_OBSERVE
    assert request.tags[c.WHY_TAG].startswith("orders: fingerprint changed (")
    run = launch(defs, instance, request)
    assert run.job_name == OBSERVE_JOB and run.tags[c.PURPOSE_TAG] == c.PURPOSE_OBSERVE
    # Wave 1: what reads orders, in the unpartitioned job, each named with its cause.
    wave1 = tick()
    assert selections(wave1) == [["first_seen_orders", "order_status_log", "stg_orders"]]
    (request,) = wave1.run_requests
    assert request.job_name == "strata_unpartitioned"
    assert request.tags[c.PURPOSE_TAG] == c.PURPOSE_REBUILD
    # In the engine's words (`strata plan`'s line): the path, what changed, the window.
    why = request.tags[c.WHY_TAG]
    assert why.startswith(
        "first_seen_orders: delta trusted: nothing appeared at or below the watermark; `orders` changed ("
    )
    launch(defs, instance, request)
    # Wave 2: the one changed day of daily_revenue as a one-partition ranged run, with its cause.
    wave2 = tick()
    daily = [
        request for request in wave2.run_requests if request.asset_selection == [dg.AssetKey("daily_revenue")]
    ]
    (request,) = daily
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == (day, day)
    assert request.tags[c.STALE_PARTITIONS_TAG] == "1"
    why = request.tags[c.WHY_TAG]
    # A day model over a model: the slices stg_orders' new segment changed, and only those (the
    # rows its lateness re-read came back equal, so their day is not rebuilt).
    assert why.startswith(
        "slice-complete rebuild of the slices its input models' new segments reach; `stg_orders` changed ("
    )
    assert why.endswith(f"; 1 partition to rebuild: {day}")
    assert request.job_name == "strata_daily_revenue_partitions"
    for request in wave2.run_requests:
        launch(defs, instance, request)
    month = day[:8] + "01"
    wave3 = tick()
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in wave3.run_requests] == [(month, month)]
    launch(defs, instance, wave3.run_requests[0])
    assert stale_set(defs, instance) == set()
    done = tick()
    assert done.run_requests == [] and done.skip_message.startswith("Nothing to do")
    purposes = [run.tags.get(c.PURPOSE_TAG) for run in instance.get_runs() if c.PURPOSE_TAG in run.tags]
    assert sorted(purposes) == [c.PURPOSE_OBSERVE] + [c.PURPOSE_REBUILD] * (len(purposes) - 1)


def test_a_new_code_version_is_seen_after_idle_ticks(shop):
    """The idle shortcut keys on the code versions too: reloaded definitions are planned again."""
    project, warehouse, defs, instance = shop
    tick = Ticks(defs, instance)
    for _ in range(2):
        assert tick().run_requests == []
    edit_module(
        project / "staging.strata",
        "filter status <> 'cancelled'",
        "filter status not in ('cancelled', 'void')",
    )
    tick.defs = build_definitions(project, warehouse=warehouse)
    (request,) = tick().run_requests
    assert request.asset_selection == [dg.AssetKey("stg_orders")]
    assert request.tags[c.WHY_TAG].startswith(
        "stg_orders: full: the model's code changed since its last build; the model's code changed ("
    )


HOLD_WRITE_LOCK = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_tick_while_another_process_writes_the_warehouse_is_skipped_with_e021(shop):
    project, warehouse, defs, instance = shop
    tick = Ticks(defs, instance)
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(warehouse)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "locked"
        started = time.monotonic()
        busy = tick()
        waited = time.monotonic() - started
    finally:
        writer.stdin.close()
        writer.wait(30)
    assert busy.run_requests == []
    assert "error[E021]" in busy.skip_message
    assert "the next tick tries again" in busy.skip_message
    assert waited < 30  # a short wait, not the run's lock timeout (120 s)
    after = tick()
    assert after.run_requests == [] and after.skip_message.startswith("Nothing to do")


def test_a_changed_partitioned_source_is_observed_through_its_whole_companion(events):  # noqa: F811
    warehouse, defs, instance = events
    tick = Ticks(defs, instance)
    assert tick().run_requests == []
    execute(warehouse, "UPDATE raw.events SET amount = amount + 1 WHERE event_day = DATE '2025-02-03'")
    observe = tick()
    assert selections(observe) == [["events__whole"]]
    launch(defs, instance, observe.run_requests[0])
    rebuild = tick()
    ranges = {
        request.asset_selection[0].to_user_string(): (
            request.tags.get(RANGE_START_TAG),
            request.tags.get(RANGE_END_TAG),
        )
        for request in rebuild.run_requests
    }
    assert ranges == {"event_kinds": (None, None), "daily_events": ("2025-02-03", "2025-02-03")}


@pytest.fixture
def shop_over_a_view(tmp_path):
    """The small shop with `stg_orders` a `materialize: view` model, everything materialized.
    `daily_revenue` then reads a view as `from`: a partitioned model the engine does not tell the
    stale partitions of (its build may group the view's rows or the source's rows), so the sensor
    reads Dagster's status of its partitions."""
    project, warehouse = make_small_shop(tmp_path)
    edit_module(project / "staging.strata", STAGED, "  materialize: view\n")
    (project / "tests.strata").unlink()  # its tests include an upsert step of stg_orders
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    materialize_everything(defs, instance)
    return project, warehouse, defs, instance


def test_a_first_reading_of_the_stale_status_is_spread_over_ticks_and_plans_when_complete(
    shop_over_a_view, monkeypatch
):
    """At thousands of partitions a first reading of every status outlasts a tick: it goes on
    from the cursor, and no run is requested before every partition was read. The partitioned
    model here is one the engine does not answer for (it reads a view model), so its partitions'
    statuses are Dagster's, read tick after tick."""
    project, warehouse, defs, instance = shop_over_a_view
    strata = defs.resources[UNSCOPED.resource_key]
    assert "daily_revenue" not in stale_partitions(strata.project_path, strata.warehouse_path)
    change_order(warehouse, paid_order(warehouse))
    tick = Ticks(defs, instance)
    launch(defs, instance, tick().run_requests[0])  # the observation of orders
    expected = requests(tick.evaluate(None))
    assert expected  # wave 1
    monkeypatch.setattr(stale_sensor, "SCAN_SECONDS", 0.0)  # a partition or so per tick
    monkeypatch.setattr(stale_sensor, "SCAN_MIN_PARTITIONS", 1)
    cursor, reading = None, 0
    for _ in range(200):
        result = tick.evaluate(cursor)
        cursor = result.cursor
        if result.run_requests:
            break
        assert result.skip_message.startswith("Reading Dagster's stale status, continued next tick")
        reading += 1
    # A partition or more per tick, the last (planning) tick's included: 40 days of daily_revenue alone.
    assert reading + 1 >= 40
    assert requests(result) == expected


SUMMARY_MODEL = """
model event_summary {
  from daily_events
  group event_day >= DATE '2025-01-20' as is_late
  aggregate total = sum(total)
  description: 'Unpartitioned: reads every day of daily_events through daily_events__whole.'
}
"""


def test_a_rollback_behind_dagsters_back_is_observed_through_the_whole_companion(tmp_path):
    """`strata rollback` repoints daily_events without Dagster: the sensor sees from the history
    that its live content is no longer the version `daily_events__whole` last recorded, observes
    the companion, and the unpartitioned reader is then stale."""
    project, warehouse = make_events_project(tmp_path, EVENTS_PROJECT + SUMMARY_MODEL)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    keys = day_keys()
    assert execute_assets(defs, instance, ["events"]).success
    assert execute_assets(defs, instance, ["daily_events"], partitions=(keys[0], keys[-1])).success
    first = history_entries(warehouse)[-1].run_id
    assert execute_assets(defs, instance, ["event_summary"]).success
    execute(warehouse, "UPDATE raw.events SET amount = amount + 1 WHERE event_day = DATE '2025-02-03'")
    assert execute_assets(defs, instance, ["events"]).success
    assert execute_assets(defs, instance, ["daily_events"], partitions="2025-02-03").success
    assert execute_assets(defs, instance, ["event_summary"]).success
    assert stale_set(defs, instance) <= {"monthly_events[2025-02-01]", "monthly_events[2025-01-01]"}
    tick = Ticks(defs, instance)
    idle = tick()
    assert [name for names in selections(idle) for name in names if "__whole" in name] == []

    operations.rollback(warehouse, first)  # behind Dagster's back
    observe = tick()
    assert selections(observe) == [["daily_events__whole"]]
    assert "daily_events__whole: live content changed" in observe.run_requests[0].tags[c.WHY_TAG]
    launch(defs, instance, observe.run_requests[0])
    assert "event_summary" in stale_set(defs, instance)
    assert "daily_events__whole" not in {n for names in selections(tick()) for n in names}
