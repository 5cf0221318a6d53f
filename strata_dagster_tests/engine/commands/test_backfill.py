"""`strata backfill`: corrections from a recorded run's context, a mandatory reason, E085."""

import json
import subprocess
import sys

import pytest

from strata_dagster.engine.commands import operations
from strata_dagster.engine.commands.backfill import backfill
from strata_dagster.engine.commands.replay import replay
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import execute, history_count, make_shop, view_tables

DOWNSTREAM_OF_CUSTOMERS = {"stg_customers", "orders_enriched", "daily_revenue", "monthly_revenue"}


@pytest.fixture
def corrected(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=2_000)
    first = run_project(project, warehouse)
    execute(
        warehouse,
        "CREATE SCHEMA fixes; CREATE TABLE fixes.customers AS "
        "SELECT * REPLACE (CASE WHEN customer_id = 1 THEN 'fixed' ELSE region END AS region) FROM raw.customers",
    )
    return project, warehouse, first


def test_backfill_rebuilds_what_the_correction_makes_stale(corrected):
    project, warehouse, first = corrected
    result = backfill(
        project, warehouse, first.run_id, "corrected upstream extract", sources=["customers=fixes.customers"]
    )
    rebuilt = {outcome.model for outcome in result.outcomes if outcome.path != "reused"}
    assert rebuilt == DOWNSTREAM_OF_CUSTOMERS
    assert execute(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1") == [("fixed",)]
    entry = execute(
        warehouse,
        "SELECT kind, backfill_of, reason, overrides FROM strata.entries ORDER BY entry DESC LIMIT 1",
    )
    assert entry == [
        ("backfill", first.run_id, "corrected upstream extract", '{"customers": "fixes.customers"}')
    ]
    report = replay(warehouse, result.run_id)
    assert report.entry.backfill_of == first.run_id and report.entry.reason == "corrected upstream extract"
    # History is never rewritten: the corrected run is intact and can be rolled back to.
    assert execute(warehouse, "SELECT kind FROM strata.entries ORDER BY entry") == [("run",), ("backfill",)]
    views_before_backfill = view_tables(warehouse)
    operations.rollback(warehouse, first.run_id)
    assert view_tables(warehouse) != views_before_backfill


def test_same_data_and_selection_give_the_same_backfill_id(corrected):
    project, warehouse, first = corrected
    one = backfill(project, warehouse, first.run_id, "fix", sources=["customers=fixes.customers"])
    operations.rollback(warehouse, first.run_id)
    two = backfill(project, warehouse, first.run_id, "fix again", sources=["customers=fixes.customers"])
    assert one.run_id == two.run_id
    assert {outcome.path for outcome in two.outcomes} == {"reused"}  # snapshots reused by identity


def test_models_trim_the_selection(corrected):
    project, warehouse, first = corrected
    result = backfill(
        project,
        warehouse,
        first.run_id,
        "only staging",
        sources=["customers=fixes.customers"],
        models=["stg_customers"],
    )
    assert [outcome.model for outcome in result.outcomes] == ["stg_customers"]


@pytest.mark.parametrize(
    ("arguments", "cause", "needle"),
    [
        ({"run_id": "deadbeefdead"}, "E023", "no run"),
        ({"models": ["nope"]}, "E025", "no model"),
        ({"models": [","]}, "E025", "names no model"),
        ({"partitions": ["2025-13"]}, "E040", "neither a day"),
        ({"sources": ["customers"]}, "E022", "malformed"),
        ({"sources": ["nope=fixes.customers"]}, "E022", "names no source"),
        ({"sources": ["customers=fixes.absent"]}, "E022", "no table"),
        ({"reason": None}, None, "needs a reason"),
        ({"reason": "   "}, None, "needs a reason"),
    ],
)
def test_every_mistake_is_e085_naming_its_cause_and_publishes_nothing(corrected, arguments, cause, needle):
    """Every error a backfill reports is E085 (docs/language.md, section 9); the specific cause keeps its
    own code and words in the message, and its hint."""
    project, warehouse, first = corrected
    before = (history_count(warehouse), view_tables(warehouse))
    call = {"run_id": first.run_id, "reason": "why", "sources": ["customers=fixes.customers"], **arguments}
    with pytest.raises(StrataError) as caught:
        backfill(project, warehouse, call.pop("run_id"), call.pop("reason"), **call)
    assert caught.value.code == "E085", caught.value
    assert needle in caught.value.message
    if cause is not None:
        assert caught.value.message.startswith(f"backfill cannot start ({cause}): "), caught.value.message
        assert caught.value.hint and "nothing was published" in caught.value.hint
    assert (history_count(warehouse), view_tables(warehouse)) == before


def test_a_pin_failure_during_a_backfill_is_e085(corrected):
    project, warehouse, first = corrected
    execute(warehouse, "INSERT INTO fixes.customers SELECT * FROM fixes.customers WHERE customer_id = 2")
    before = (history_count(warehouse), view_tables(warehouse))
    with pytest.raises(StrataError) as caught:
        backfill(project, warehouse, first.run_id, "dupes", sources=["customers=fixes.customers"])
    assert caught.value.code == "E085" and "E030" in caught.value.message
    assert (history_count(warehouse), view_tables(warehouse)) == before


def test_cli_backfill_and_history_json(corrected):
    project, warehouse, first = corrected
    base = [sys.executable, "-m", "strata_dagster.cli.main"]
    missing = subprocess.run(
        [
            *base,
            "backfill",
            str(project),
            first.run_id,
            "--warehouse",
            str(warehouse),
            "--source",
            "customers=fixes.customers",
        ],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "error[E085]" in missing.stderr and "Traceback" not in missing.stderr
    done = subprocess.run(
        [
            *base,
            "backfill",
            str(project),
            first.run_id[:12],
            "--warehouse",
            str(warehouse),
            "--reason",
            "late fix",
            "--source",
            "customers=fixes.customers",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    history = subprocess.run(
        [*base, "history", str(project), "--warehouse", str(warehouse), "--json"],
        capture_output=True,
        text=True,
    )
    rows = json.loads(history.stdout)
    assert [row["kind"] for row in rows] == ["run", "backfill"]
    assert rows[1]["backfill_of"] == first.run_id and rows[1]["reason"] == "late fix"
    assert {"run_id", "kind", "started_at", "models", "backfill_of", "reason"} <= set(rows[1])
