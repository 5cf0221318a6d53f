"""A history model over a change feed as a Dagster asset: materialized from the feed's deltas, its
`strata_incremental_equals_full` check recomputes its versions from the whole feed, passes, and
fails once the live versions drift."""

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.orchestration.checks.model_checks import EQUIVALENCE_CHECK
from strata_dagster_tests.engine.commands.test_verify import replace_live
from strata_dagster_tests.engine.sources.test_change_feeds import Feed
from strata_dagster_tests.orchestration.test_dagster_checks import evaluations, run_checks
from strata_dagster_tests.support.dagster_support import execute_assets
from strata_dagster_tests.support.log_support import history_module, make_feed_project


def test_the_equivalence_check_recomputes_a_history_from_its_feed(tmp_path):
    project, warehouse = make_feed_project(tmp_path, history_module(checked="region"))
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    feed = Feed(warehouse)
    feed.write(("insert", 1, "ann", "eu"), ("insert", 2, "bob", "us"))
    assert execute_assets(defs, instance, ["customer_history"]).success
    feed.write(("update", 1, "ann", "us"), ("delete", 2), ("update", 1, "anne", "us"))
    assert execute_assets(defs, instance, ["customer_history"]).success
    check = evaluations(run_checks(defs, instance, ["customer_history"], EQUIVALENCE_CHECK))
    assert check[("customer_history", EQUIVALENCE_CHECK)].passed
    replace_live(warehouse, "customer_history", "UPDATE drift.customer_history SET valid_to = NULL")
    check = evaluations(run_checks(defs, instance, ["customer_history"], EQUIVALENCE_CHECK))
    assert not check[("customer_history", EQUIVALENCE_CHECK)].passed
