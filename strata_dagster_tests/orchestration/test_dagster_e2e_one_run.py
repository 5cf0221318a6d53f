"""End to end under `dagster dev` (webserver and daemon on 127.0.0.1, the repository's dagster.yaml),
as the Launchpad launches them: `strata_materialize_all` loads everything in one launched run whose
waves are runs of its own process (every asset and partition then fresh, the waves on the Runs page
tagged with the run that launched them); `strata_backfill_range` without a reason is refused before
any step (E085, canceled, nothing written), and with one rebuilds exactly its days."""

from strata_dagster_tests.support.dagster_support import (
    DONE,
    dagster_dev,
    day_keys,
    example_workspace,
    wait_for,
    warehouse_digest,
)

LAUNCHED_BY = "strata/launched_by"
DAYS = 40


def settled(graphql, run_id):
    """The run and the runs it launched, once all of them are done."""
    runs = graphql.run_times()
    group = [run for run in runs.values() if run["runId"] == run_id or run["tags"].get(LAUNCHED_BY) == run_id]
    return group if all(run["status"] in DONE for run in group) and runs[run_id]["status"] in DONE else None


def test_the_first_load_and_a_range_backfill_in_one_run_each(tmp_path):
    project, warehouse, home = example_workspace(tmp_path, days=DAYS)
    with dagster_dev(tmp_path, home) as (graphql, log):
        loaded = graphql.launch_job("strata_materialize_all")
        runs = wait_for(lambda: settled(graphql, loaded), 600, "strata_materialize_all and its waves", log)
        assert {run["runId"]: run["status"] for run in runs} == {run["runId"]: "SUCCESS" for run in runs}
        waves = sorted((run for run in runs if run["runId"] != loaded), key=lambda run: run["startTime"])
        assert [run["jobName"] for run in waves] == [
            "strata_observe_sources",
            "strata_unpartitioned",
            "strata_daily_revenue_partitions",
            "strata_monthly_revenue_partitions",
        ]
        assert graphql.stale() == set()
        stats = graphql.partition_stats("daily_revenue")
        assert (stats["numPartitions"], stats["numMaterialized"], stats["numFailed"]) == (DAYS, DAYS, 0)

        days = day_keys()[5:8]
        config = {
            "ops": {
                "backfill_range": {
                    "config": {"assets": ["daily_revenue"], "first": days[0], "last": days[-1]}
                }
            }
        }
        before = warehouse_digest(warehouse)
        refused = graphql.launch_job("strata_backfill_range", config=config)
        (run,) = wait_for(lambda: settled(graphql, refused), 300, "the refused range backfill", log)
        assert run["status"] == "CANCELED"
        events = graphql.run_events(refused)
        assert not [event for event in events if event["__typename"] == "ExecutionStepStartEvent"]
        (canceled,) = [event for event in events if event["__typename"] == "RunCanceledEvent"]
        assert canceled["message"].startswith("error[E085]")
        assert warehouse_digest(warehouse) == before

        accepted = graphql.launch_job(
            "strata_backfill_range", {"strata/reason": "restated three days"}, config
        )
        runs = wait_for(lambda: settled(graphql, accepted), 300, "the range backfill", log)
        assert {run["status"] for run in runs} == {"SUCCESS"}
        (wave,) = [run for run in runs if run["runId"] != accepted]
        assert wave["jobName"] == "strata_backfill_daily_revenue_partitions"
        materialized = [
            event
            for event in graphql.materializations("daily_revenue", days)
            if event["runId"] == wave["runId"]
        ]
        assert sorted(event["partition"] for event in materialized) == days
        assert {event["metadata"]["strata/kind"] for event in materialized} == {"backfill"}
        assert {event["metadata"]["strata/reason"] for event in materialized} == {"restated three days"}
