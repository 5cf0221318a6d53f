"""`freshness: 1 day` on a model: Dagster's time-window freshness policy on its asset; the
language accepts minutes, hours, days and weeks, bare or quoted, and rejects anything else (E065)."""

import datetime as dt

import dagster as dg
import pytest

from strata_dagster import build_definitions
from strata_dagster_tests.support.dagster_support import make_small_shop
from strata_dagster_tests.support.engine_support import edit_module
from strata_dagster_tests.support.helpers import project_of


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("1 day", 86_400),
        ("'12 hours'", 43_200),
        ("30 minutes", 1_800),
        ("2 weeks", 1_209_600),
        ("1 minute", 60),
    ],
)
def test_freshness_is_a_duration_of_at_least_a_minute(written, seconds):
    project = project_of(f"model m {{\n  from orders\n  freshness: {written}\n}}\n")
    assert project.models["m"].properties.freshness.seconds == seconds


def test_freshness_becomes_the_assets_time_window_policy_and_nothing_else_changes(tmp_path):
    project, warehouse = make_small_shop(tmp_path, rows=200, days=3)
    before = build_definitions(project, warehouse=warehouse).resolve_asset_graph()
    edit_module(
        project / "marts.strata",
        "  owners: ['team:finance']\n",
        "  owners: ['team:finance']\n  freshness: 1 day\n",
    )
    edit_module(
        project / "staging.strata", "model stg_customers {", "model stg_customers {\n  freshness: 6 hours"
    )
    graph = build_definitions(project, warehouse=warehouse).resolve_asset_graph()
    policies = {
        key.to_user_string(): graph.get(key).freshness_policy
        for key in graph.materializable_asset_keys
        if graph.get(key).freshness_policy is not None
    }
    assert set(policies) == {"daily_revenue", "stg_customers"}
    assert all(isinstance(policy, dg.FreshnessPolicy) for policy in policies.values())
    assert policies["daily_revenue"].fail_window.to_timedelta() == dt.timedelta(days=1)
    assert policies["stg_customers"].fail_window.to_timedelta() == dt.timedelta(hours=6)
    assert policies["daily_revenue"].warn_window is None
    # A freshness expectation is no part of what a model computes: its code version stays.
    for key in graph.materializable_asset_keys:
        assert graph.get(key).code_version == before.get(key).code_version
