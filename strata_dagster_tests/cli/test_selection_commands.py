"""Selectors through the commands that take `--models` (run, verify, backfill, compile), and
model tags as Dagster asset tags."""

import json

import dagster as dg
import pytest
from click.testing import CliRunner

from strata_dagster import build_definitions
from strata_dagster.cli.main import main
from strata_dagster.engine.commands.backfill import backfill
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.dagster_support import make_small_shop
from strata_dagster_tests.support.engine_support import edit_module, execute, make_shop

FINANCE = {"daily_revenue", "monthly_revenue"}


@pytest.fixture
def shop(tmp_path):
    return make_shop(tmp_path, rows=1_000)


def invoke(*args: str):
    return CliRunner().invoke(main, [str(arg) for arg in args])


def last_run_models(project, warehouse) -> list[str]:
    history = invoke("history", project, "--warehouse", warehouse, "--json")
    assert history.exit_code == 0, history.output
    return json.loads(history.output)[-1]["models"]


def test_run_takes_every_selector_form(shop):
    project, warehouse = shop
    cases = [
        ("+orders_enriched", ["stg_customers", "stg_orders", "orders_enriched"]),
        ("stg_*", ["stg_customers", "stg_orders"]),
        ("tag:finance", ["daily_revenue", "monthly_revenue"]),
        ("stg_customers+", ["stg_customers", "daily_revenue", "orders_enriched", "monthly_revenue"]),
        ("+daily_revenue+", ["stg_customers", "stg_orders", "daily_revenue", "monthly_revenue"]),
        ("order_status_log,first_seen_orders", ["first_seen_orders", "order_status_log"]),
    ]
    for selection, expected in cases:
        result = invoke("run", project, "--warehouse", warehouse, "--models", selection)
        assert result.exit_code == 0, (selection, result.output)
        assert last_run_models(project, warehouse) == expected, selection


def test_run_reports_an_unmatched_selector_with_did_you_mean(shop):
    project, warehouse = shop
    result = invoke("run", project, "--warehouse", warehouse, "--models", "+orders_enrichd")
    assert result.exit_code == 1
    assert "error[E025]" in result.output and "did you mean `orders_enriched`?" in result.output
    assert "Traceback" not in result.output
    tag = invoke("run", project, "--warehouse", warehouse, "--models", "tag:finanse")
    assert tag.exit_code == 1 and "did you mean `tag:finance`?" in tag.output
    history = invoke("history", project, "--warehouse", warehouse, "--json")
    assert json.loads(history.output) == []  # nothing ran


def test_verify_and_compile_take_selectors(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    verified = invoke("verify", project, "--warehouse", warehouse, "--models", "tag:finance")
    assert verified.exit_code == 0, verified.output
    assert "verify: 2 models equal to a full rebuild" in verified.output
    upstream = invoke("verify", project, "--warehouse", warehouse, "--models", "+orders_enriched")
    assert "verify: 3 models equal to a full rebuild" in upstream.output
    unknown = invoke("verify", project, "--warehouse", warehouse, "--models", "stg_x*")
    assert unknown.exit_code == 1 and "error[E025]" in unknown.output

    compiled = invoke("compile", project, "--warehouse", warehouse, "--model", "stg_*")
    assert compiled.exit_code == 0, compiled.output
    assert [line for line in compiled.output.splitlines() if line.startswith("-- model")] == [
        "-- model stg_customers",
        "-- model stg_orders",
    ]


def test_backfill_trims_with_selectors(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    execute(
        warehouse,
        "CREATE SCHEMA fixes; CREATE TABLE fixes.customers AS "
        "SELECT * REPLACE (CASE WHEN customer_id = 1 THEN 'fixed' ELSE region END AS region) FROM raw.customers",
    )
    result = backfill(
        project, warehouse, first.run_id, "fix", sources=["customers=fixes.customers"], models=["stg_*"]
    )
    assert {outcome.model for outcome in result.outcomes if outcome.path != "reused"} == {"stg_customers"}
    assert last_run_models(project, warehouse) == ["stg_customers", "stg_orders"]

    again = invoke(
        "backfill",
        project,
        first.run_id,
        "--warehouse",
        warehouse,
        "--reason",
        "fix downstream",
        "--source",
        "customers=fixes.customers",
        "--models",
        "tag:finance",
    )
    assert again.exit_code == 0, again.output
    assert last_run_models(project, warehouse) == ["daily_revenue", "monthly_revenue"]

    with pytest.raises(StrataError) as caught:
        backfill(project, warehouse, first.run_id, "fix", models=["+dayly_revenue"])
    assert caught.value.code == "E085" and caught.value.message.startswith("backfill cannot start (E025)")
    assert "did you mean `daily_revenue`?" in caught.value.hint


def test_tags_are_labels_not_code(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    edit_module(project / "marts.strata", "tags: [finance, daily]", "tags: [finance, daily, reviewed]")
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_model_tags_are_dagster_asset_tags(tmp_path):
    project, warehouse = make_small_shop(tmp_path)
    defs = build_definitions(project, warehouse=warehouse)
    graph = defs.resolve_asset_graph()

    def user_tags(name):
        tags = graph.get(dg.AssetKey(name)).tags
        return {key: value for key, value in tags.items() if not key.startswith("dagster/")}

    assert user_tags("daily_revenue") == {"finance": "", "daily": ""}
    assert user_tags("monthly_revenue") == {"finance": "", "monthly": ""}
    assert user_tags("stg_orders") == {}
    # Dagster's own selection syntax finds what `--models tag:finance` builds.
    selected = dg.AssetSelection.from_string("tag:finance").resolve(graph)
    assert {key.to_user_string() for key in selected} == FINANCE
