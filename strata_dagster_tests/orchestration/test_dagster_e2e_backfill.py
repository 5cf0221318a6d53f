"""End to end, as the UI launches a backfill: `dagster dev` (webserver and daemon) on 127.0.0.1
with a temporary DAGSTER_HOME, GraphQL `launchPartitionBackfill` over three days of
`daily_revenue`. Without the `strata/reason` tag every run is refused before any step (E085,
CANCELED, no stack trace), the warehouse file is untouched and no partition is shown failed; with it, the runs succeed and the reason is in `strata history`, on
the runs and on every materialization."""

import json
import subprocess
import sys

from strata_dagster_tests.support.dagster_support import (
    DONE,
    dagster_dev,
    day_keys,
    example_workspace,
    history_entries,
    wait_for,
    warehouse_digest,
)

REASON = "strata/reason"
WHY = "restated January revenue"


def settled_runs(graphql, backfill_id):
    """The backfill's runs once it has some and all of them are done."""
    runs = graphql.backfill(backfill_id)["runs"]
    return runs if runs and all(run["status"] in DONE for run in runs) else None


def test_a_backfill_without_a_reason_fails_every_run_and_one_with_a_reason_is_recorded(tmp_path):
    project, warehouse, home = example_workspace(tmp_path)
    days = day_keys()[:3]
    before = warehouse_digest(warehouse)
    with dagster_dev(tmp_path, home) as (graphql, log):
        refused = graphql.launch_backfill("daily_revenue", days)
        runs = wait_for(lambda: settled_runs(graphql, refused), 180, "the backfill without a reason", log)
        assert {run["status"] for run in runs} == {"CANCELED"}
        for run in runs:
            events = graphql.run_events(run["runId"])
            assert not [event for event in events if event["__typename"] == "ExecutionStepStartEvent"]
            assert not [event for event in events if event.get("error")]
            (canceled,) = [event for event in events if event["__typename"] == "RunCanceledEvent"]
            message = canceled["message"]
            assert message.startswith("error[E085]") and "has no `strata/reason` tag" in message
            assert "Add tags to backfill runs" in message
        assert warehouse_digest(warehouse) == before
        stats = graphql.partition_stats("daily_revenue")
        assert (stats["numFailed"], stats["numMaterialized"], stats["numMaterializing"]) == (0, 0, 0)

        accepted = graphql.launch_backfill("daily_revenue", days, {REASON: WHY})
        runs = wait_for(lambda: settled_runs(graphql, accepted), 180, "the backfill with a reason", log)
        assert {run["status"] for run in runs} == {"SUCCESS"}
        assert {run["tags"][REASON] for run in runs} == {WHY}
        materialized = graphql.materializations("daily_revenue", days)
        assert sorted(event["partition"] for event in materialized) == days
        for event in materialized:
            assert event["metadata"]["strata/reason"] == WHY
            assert event["metadata"]["strata/kind"] == "backfill"
        # The refused backfill ended, and is not retried: Dagster counts its canceled runs'
        # partitions as failed (no public API cancels a backfill; docs/dagster.md, Backfills).
        wait_for(lambda: graphql.backfill(refused)["status"] != "REQUESTED", 60, "its end", log)
        assert graphql.backfill(refused)["status"] == "COMPLETED_FAILED"
    (entry,) = history_entries(warehouse)
    assert (entry.kind, entry.reason, entry.models) == ("backfill", WHY, ("daily_revenue",))
    history = subprocess.run(
        [
            sys.executable,
            "-m",
            "strata_dagster.cli.main",
            "history",
            str(project),
            "--warehouse",
            str(warehouse),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [(row["kind"], row["reason"]) for row in json.loads(history.stdout)] == [("backfill", WHY)]
    assert {event["metadata"]["strata/run_id"] for event in materialized} == {entry.run_id}
