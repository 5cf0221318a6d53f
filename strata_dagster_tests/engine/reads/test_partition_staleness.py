"""The engine's stale partitions (engine.reads.partition_staleness) are exactly the partitions its next
build recomputes: random histories of appends, late updates, status changes, moves and deletes,
with the source fingerprinted by its change column or by whole rows. (A partition whose rebuild gave
its live rows again keeps the live state, and the entry keeps the new figures: it leaves the answer.)"""

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.builds.partitions import NULL_PARTITION
from strata_dagster.engine.commands.operations import rollback
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.engine.run import run_project
from strata_dagster_tests.engine.builds.test_partition_properties import START, apply, steps
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, edit_module, execute, make_shop
from strata_dagster_tests.support.partition_support import make_project

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)


def seeded_project(root, versioning="cdc(updated_at)"):
    project, warehouse = make_project(root, versioning)
    con = duckdb.connect(str(warehouse))
    con.execute(
        "INSERT INTO raw.orders SELECT range, ? + to_minutes(range * 360), ? + to_minutes(range * 360), "
        "CASE WHEN range % 7 = 0 THEN 'cancelled' ELSE 'paid' END, CASE WHEN range % 2 = 0 THEN 'web' ELSE 'shop' END, "
        "range % 40 + 1 FROM range(300)",
        [START, START],
    )
    con.close()
    run_project(project, warehouse)
    return project, warehouse


def rebuilt(outcome) -> set[str] | None:
    """The partitions a build recomputed (None: all of them, a full build)."""
    if outcome.path == "reused":
        return set()
    if "partitions" in outcome.detail:
        return set(outcome.detail["partitions"]) - {NULL_PARTITION}
    return None


def assert_predicted(predicted, outcome):
    found = rebuilt(outcome)
    if found is None:
        assert predicted.is_all, (outcome.model, outcome.path, outcome.detail)
    else:
        assert set(predicted.keys) == found, (outcome.model, outcome.path)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(updated_at)", "full"]))
def test_stale_partitions_are_what_the_next_build_recomputes(tmp_path_factory, history, versioning):
    project, warehouse = seeded_project(tmp_path_factory.mktemp("stale"), versioning)
    for clock, step in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        apply(con, step, clock)
        con.close()
        predicted = stale_partitions(project, warehouse)
        result = run_project(project, warehouse, models=["daily", "by_ts"], only_stale=True)
        for model in ("daily", "by_ts"):
            outcome = next((o for o in result.outcomes if o.model == model), None)
            if outcome is None:  # nothing built at all: nothing was stale
                assert predicted[model].keys == (), (model, step)
            else:
                assert_predicted(predicted[model], outcome)
        # The month model reads the day model's live rows: stale where the days it holds changed.
        predicted = stale_partitions(project, warehouse)
        result = run_project(project, warehouse, models=["monthly"], only_stale=True)
        if result.is_noop:
            assert predicted["monthly"].keys == ()
        else:
            assert_predicted(predicted["monthly"], result.outcome("monthly"))


def test_a_code_change_makes_every_partition_stale_and_says_so(tmp_path):
    project, warehouse = seeded_project(tmp_path)
    edit_module(project / "orders.strata", "filter amount > 0", "filter amount > 1")
    found = stale_partitions(project, warehouse)
    assert found["by_ts"].is_all and found["by_ts"].reason == "its code changed"
    assert len(found["by_ts"].keys) == 75
    assert found["daily"].keys == ()  # another model's code


def test_a_model_never_built_is_left_to_the_orchestrator(tmp_path):
    project, warehouse = make_project(tmp_path)
    assert stale_partitions(project, warehouse) == {}


def test_after_a_rollback_a_state_kept_by_a_later_cutoff_is_stale_where_the_plan_says(tmp_path):
    """An order moved to the next day of its month: `monthly_revenue` came out equal (early cutoff,
    its state kept with the moved figures). Rolled back to the first run, the month's input is the
    first run's again: no partition is stale, as the plan says (the kept figures are the undone
    run's, not the ones in effect)."""
    project, warehouse = make_shop(tmp_path)
    first = run_project(project, warehouse)
    ((order,),) = execute(
        warehouse,
        "SELECT min(order_id) FROM raw.orders WHERE status = 'paid' AND day(order_ts) BETWEEN 2 AND 20",
    )
    execute(
        warehouse,
        f"UPDATE raw.orders SET order_ts = order_ts + INTERVAL 1 DAY, {ADVANCE_UPDATED_AT} "
        "WHERE order_id = ?",
        params=[order],
    )
    moved = run_project(project, warehouse, only_stale=True)
    assert moved.outcome("monthly_revenue").path == "cutoff"
    assert stale_partitions(project, warehouse)["monthly_revenue"].keys == ()
    rollback(warehouse, first.run_id)
    assert plan_project(project, warehouse, only_stale=True).model("monthly_revenue").path == "reused"
    assert stale_partitions(project, warehouse)["monthly_revenue"].keys == ()
    # Built again, the kept state's figures are the ones after the move once more.
    run_project(project, warehouse, only_stale=True)
    assert stale_partitions(project, warehouse)["monthly_revenue"].keys == ()
    assert not plan_project(project, warehouse, only_stale=True).would_run
