"""Journeys on the stack teams deploy (strata_dagster_tests.support.production_stack): PostgreSQL (or
Dagster's default SQLite) storage, a stock instance configured by deploy/dagster.yaml, webserver,
daemon and a gRPC code server as separate processes, the shop example copied into tmp over
`strata sample-data`'s tables (500 orders over 40 days). What they check is what Dagster's public surfaces show (the
webserver's GraphQL, as the UI reads it) and what the strata CLI says of the warehouse.

- a changed source row is observed by the stale sensor and exactly the stale partitions are
  materialized, with no human action;
- a backfill from the GraphQL API as the UI sends it: without `strata/reason` every run is
  refused before any step (E085, CANCELED, no stack trace) with nothing written and no partition
  shown failed; with it, recorded in `strata history`, on the runs and on every materialization;
- the daemon and the run worker killed mid-run: the run is marked failed, the warehouse is the
  state before the run or after it, and once the daemon is back the next ticks complete it
  (`strata verify` passes).

Marker `production`; `STRATA_SKIP_PRODUCTION=1` skips them. Those also marked `compat` are the
compatibility tier's selection (.ci/run): with every dependency at the lowest version admitted
(Dagster 1.12, DuckDB 2.0.1, ...) they load the example in a code server, materialize it, take a
backfill with a reason and the stale sensor's ticks."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import signal
import time
import uuid
from contextlib import ExitStack

import dagster as dg
import pytest

from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.dagster_support import (
    DONE,
    change_order,
    execute_assets,
    materialize_everything,
    order_day,
    wait_for,
    warehouse_digest,
)
from strata_dagster_tests.support.production_stack import (
    copy_example,
    instance_environment,
    postgres_server,
    prepare_instance,
    production_stack,
    require_postgres,
    view_pointers,
)

# One worker runs the journeys, so the example is materialized once for both that need it.
pytestmark = [
    pytest.mark.production,
    pytest.mark.xdist_group("production"),
    pytest.mark.skipif(os.environ.get("STRATA_SKIP_PRODUCTION") == "1", reason="STRATA_SKIP_PRODUCTION=1"),
]

ROWS = 500
# The sensor that materializes stale partitions; its name may gain a project's prefix.
STALE_SENSOR_SUFFIX = "materialize_stale"
PYTHON_MODEL = "region_summary"  # the example's Python model (definitions.py)
REASON_TAG = "strata/reason"
WHY = "restated January revenue"


@pytest.fixture(scope="session")
def postgres():
    require_postgres()
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def materialized_on_postgres(postgres, tmp_path_factory):
    """The example materialized once on PostgreSQL for the tests of this process that deploy it
    materialized (the same in-process materialization each would run, 40 s and more): its folder
    (project, warehouse, DAGSTER_HOME) saved aside and its database, which each test copies fresh.
    Returns (folder, saved copy, database)."""
    folder = tmp_path_factory.getbasetemp() / "production-materialized"
    database = new_database_name()
    project, _ = copy_example(folder, ROWS)
    home, environment = prepare_instance(folder, postgres, database)
    with pytest.MonkeyPatch.context() as patch:
        set_dagster_environment(patch, environment)
        materialize_in_process(project, home)
    saved = tmp_path_factory.mktemp("production-materialized-saved")
    shutil.copytree(folder, saved, dirs_exist_ok=True)
    return folder, saved, database


@pytest.fixture
def deploy(request, tmp_path, monkeypatch):
    """`deploy(storage, materialized=False)`: the running stack over the example, a fresh warehouse
    and a fresh instance (`postgres` or `sqlite` storage), everything materialized first if asked
    (on PostgreSQL: a fresh copy of `materialized_on_postgres`); stopped when the test ends."""
    stacks = ExitStack()
    request.addfinalizer(stacks.close)

    def make(storage: str, *, materialized: bool = False):
        server = request.getfixturevalue("postgres") if storage == "postgres" else None
        if server is not None and materialized:
            template = request.getfixturevalue("materialized_on_postgres")
            project, warehouse, home, environment = materialized_copy(server, template)
            set_dagster_environment(monkeypatch, environment)
        else:
            project, warehouse = copy_example(tmp_path, ROWS)
            home, environment = prepare_instance(tmp_path, server, new_database_name())
            set_dagster_environment(monkeypatch, environment)
            if materialized:
                materialize_in_process(project, home)
        return stacks.enter_context(
            production_stack(tmp_path, project, warehouse, home, environment, storage)
        )

    return make


def new_database_name() -> str:
    return f"dagster_{uuid.uuid4().hex[:12]}"


def set_dagster_environment(patch: pytest.MonkeyPatch, environment: dict[str, str]) -> None:
    for key, value in environment.items():
        if key.startswith("DAGSTER_"):
            patch.setenv(key, value)


def materialized_copy(server, materialized):
    """A fresh copy of the materialized example: its folder restored at the path it was built at
    (the warehouse and the instance name the files they wrote by that path) and its database
    copied under a new name. Returns (project, warehouse, home, environment)."""
    folder, saved, template = materialized
    shutil.rmtree(folder)
    shutil.copytree(saved, folder)
    database = new_database_name()
    server.create_database(database, template=template)
    project, home = folder / "shop", folder / "dagster_home"
    return project, project / "warehouse.duckdb", home, instance_environment(home, server, database)


def materialize_in_process(project, home) -> None:
    """Every asset of the example materialized in this process on the stack's instance (as a
    deployment's first load would have left it)."""
    defs = runpy.run_path(str(project / "definitions.py"))["defs"]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        materialize_everything(defs, instance)
        assert execute_assets(defs, instance, [PYTHON_MODEL]).success


def millis() -> int:
    return int(time.time() * 1000)


def settled(stack, since: float, predicate=lambda: True):
    """The runs created after `since` (epoch seconds) once none is queued or running, nothing is
    stale and `predicate` holds."""
    runs = [run for run in stack.graphql.run_records() if run["creationTime"] > since]
    if any(run["status"] not in DONE for run in runs) or not predicate():
        return None
    return runs if not stack.graphql.stale() else None


def verified(stack, *selection: str) -> None:
    done = stack.strata("verify", *selection)
    assert done.returncode == 0, done.stdout + done.stderr


# Dagster's default SQLite storage under the same stack is the compatibility tier's case (.ci/run
# sets STRATA_COMPAT_TIER=1): on the newest minor, `dagster dev`'s own SQLite instance runs the same
# journey (orchestration/test_dagster_e2e.py), so the main run spends its time on PostgreSQL only.
SQLITE_IN_COMPAT_TIER = pytest.mark.skipif(
    os.environ.get("STRATA_COMPAT_TIER") != "1",
    reason="SQLite storage on this stack runs in the compatibility tier (STRATA_COMPAT_TIER=1)",
)


@pytest.mark.parametrize(
    "storage", ["postgres", pytest.param("sqlite", marks=[pytest.mark.compat, SQLITE_IN_COMPAT_TIER])]
)
def test_a_changed_source_row_is_observed_and_exactly_its_stale_partitions_are_materialized_unattended(
    deploy, storage
):
    stack = deploy(storage, materialized=True)
    graphql = stack.graphql
    assert graphql.stale() == set()
    started = time.time()  # runs before it are the first load's, in this process
    sensor = graphql.sensor_named(STALE_SENSOR_SUFFIX)
    graphql.start_sensor_named(sensor["name"])
    wait_for(
        lambda: graphql.sensor_named(STALE_SENSOR_SUFFIX)["sensorState"]["ticks"],
        120,
        "the sensor's first tick",
        stack.log("daemon"),
    )
    assert not [run for run in graphql.run_records() if run["creationTime"] > started]

    order = paid_order(stack.warehouse)
    day = order_day(stack.warehouse, order)
    changed_at = millis()
    change_order(stack.warehouse, order)  # as the source's writer does, behind Dagster's back

    def rebuilt() -> bool:
        return bool(graphql.materialized_since("daily_revenue", changed_at))

    runs = wait_for(
        lambda: settled(stack, started, rebuilt), 300, "the sensor to freshen everything", stack.log("daemon")
    )
    # Exactly the stale partitions: the changed order's day and month, nothing else.
    assert graphql.materialized_since("daily_revenue", changed_at) == [day]
    assert graphql.materialized_since("monthly_revenue", changed_at) == [day[:8] + "01"]
    # Of the unpartitioned assets, only what reads `orders` may have been rebuilt.
    readers = graphql.downstream("orders")
    for name in graphql.downstream("customers") - readers:
        assert graphql.materialized_since(name, changed_at) == [], name
    assert graphql.materialized_since("stg_orders", changed_at) == [None]
    # No human launched anything: every run came from the sensor, and every one succeeded.
    assert runs and all(run["tags"].get("dagster/sensor_name") == sensor["name"] for run in runs), runs
    assert {run["status"] for run in runs} == {"SUCCESS"}
    verified(stack)


def backfill_runs(graphql, backfill_id):
    """The backfill's runs once it has some and all of them are done."""
    runs = graphql.backfill(backfill_id)["runs"]
    return runs if runs and all(run["status"] in DONE for run in runs) else None


def history(stack) -> list[dict]:
    done = stack.strata("history", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.compat
def test_a_backfill_from_the_api_needs_a_reason_and_a_refused_one_writes_nothing(deploy):
    stack = deploy("postgres")
    graphql = stack.graphql
    days = graphql(
        '{ assetNodes(assetKeys: [{path: ["daily_revenue"]}]) { partitionKeysByDimension { partitionKeys } } }'
    )["assetNodes"][0]["partitionKeysByDimension"][0]["partitionKeys"][:3]
    before = warehouse_digest(stack.warehouse)

    refused = graphql.launch_backfill("daily_revenue", days)  # no tags: no reason
    runs = wait_for(
        lambda: backfill_runs(graphql, refused), 180, "the backfill without a reason", stack.log("daemon")
    )
    assert {run["status"] for run in runs} == {"CANCELED"}, runs
    for run in runs:
        events = graphql.run_events(run["runId"])
        assert not [event for event in events if event["__typename"] == "ExecutionStepStartEvent"]
        assert not [event for event in events if event.get("error")]  # no stack trace
        (canceled,) = [event for event in events if event["__typename"] == "RunCanceledEvent"]
        message = canceled["message"]
        assert message.startswith("error[E085]") and "has no `strata/reason` tag" in message
        assert "Add tags to backfill runs" in message
    assert warehouse_digest(stack.warehouse) == before  # not a byte written
    assert history(stack) == []
    stats = graphql.partition_stats("daily_revenue")
    assert (stats["numFailed"], stats["numMaterialized"], stats["numMaterializing"]) == (0, 0, 0)

    # As the UI's partition dialog sends it, with "Add tags to backfill runs".
    accepted = graphql.launch_backfill("daily_revenue", days, {REASON_TAG: WHY})
    runs = wait_for(
        lambda: backfill_runs(graphql, accepted), 180, "the backfill with a reason", stack.log("daemon")
    )
    assert {run["status"] for run in runs} == {"SUCCESS"}
    assert {run["tags"][REASON_TAG] for run in runs} == {WHY}
    materialized = graphql.materializations("daily_revenue", days)
    assert sorted(event["partition"] for event in materialized) == days
    assert {event["metadata"][REASON_TAG] for event in materialized} == {WHY}
    assert {event["metadata"]["strata/kind"] for event in materialized} == {"backfill"}
    (entry,) = history(stack)
    assert (entry["kind"], entry["reason"], entry["models"]) == ("backfill", WHY, ["daily_revenue"])
    assert {event["metadata"]["strata/run_id"] for event in materialized} == {entry["run_id"]}
    wait_for(
        lambda: graphql.backfill(refused)["status"] != "REQUESTED",
        90,
        "the refused backfill's end",
        stack.log("daemon"),
    )
    # Its runs were canceled; Dagster counts their partitions as failed (docs/dagster.md, Backfills).
    assert graphql.backfill(refused)["status"] == "COMPLETED_FAILED"
    verified(stack, "--models", "daily_revenue")


def test_the_daemon_and_a_run_worker_killed_mid_run_fail_the_run_and_the_next_tick_completes_it(deploy):
    stack = deploy("postgres", materialized=True)
    graphql = stack.graphql
    started = time.time()
    entries_before, views_before = history(stack), view_pointers(stack.warehouse)
    sensor = graphql.sensor_named(STALE_SENSOR_SUFFIX)
    graphql.start_sensor_named(sensor["name"])
    models = graphql.downstream("orders")
    order = paid_order(stack.warehouse)
    day = order_day(stack.warehouse, order)
    change_order(stack.warehouse, order)

    def rebuilding() -> tuple[dict, int] | None:
        """A run of the sensor's that materializes models, once one of its steps has started."""
        for run in graphql.run_records():
            if run["assets"] & models and run["status"] == "STARTED":
                pid = graphql.busy_worker(run["runId"])
                if pid is not None:
                    return run, pid
        return None

    run, pid = wait_for(rebuilding, 300, "a rebuild run of the sensor's", stack.log("daemon"), interval=0.1)
    # The host loses the daemon and the run's process at once (the code server, which started the
    # run, survives: with the default run launcher it is what watches its run workers).
    stack.kill("daemon")
    os.kill(pid, signal.SIGKILL)
    killed_at = millis()

    def ended() -> dict | None:
        (found,) = [item for item in graphql.run_records() if item["runId"] == run["runId"]]
        return found if found["status"] in DONE else None

    assert wait_for(ended, 60, "the killed run to be marked", stack.log("code_server"))["status"] == "FAILURE"
    messages = [event.get("message") or "" for event in graphql.run_log(run["runId"])]
    assert any("terminated by signal 9" in message for message in messages), messages[-5:]
    # The state before the run, or the state after it: never part of it.
    entries, views = history(stack), view_pointers(stack.warehouse)
    if entries == entries_before:
        assert views == views_before
    else:
        (published,) = entries[len(entries_before) :]
        assert set(published["models"]) <= run["assets"], (published["models"], run["assets"])
        moved = {name for name in views if views[name] != views_before.get(name)}
        assert moved <= {f"v_{model}" for model in published["models"]}, moved
        verified(stack, "--models", ",".join(published["models"]))
    stack.start_daemon()

    def rebuilt() -> bool:
        return day in graphql.materialized_since("daily_revenue", killed_at)

    runs = wait_for(
        lambda: settled(stack, started, rebuilt), 300, "the next ticks to complete it", stack.log("daemon")
    )
    later = [item for item in runs if item["runId"] != run["runId"]]
    assert {item["status"] for item in later} == {"SUCCESS"}, later
    assert graphql.materialized_since("daily_revenue", killed_at) == [day]
    verified(stack)
