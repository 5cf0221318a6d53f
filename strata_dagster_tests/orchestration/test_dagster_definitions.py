"""build_definitions on the shop example: keys, groups, descriptions, code versions, partitions,
pools, the resource's validation and the translator's override points."""

import re
import runpy
import warnings

import dagster as dg
import pytest

from strata_dagster import StrataDagsterTranslator, StrataResource, build_definitions
from strata_dagster.engine.sources.readings import model_states
from strata_dagster.errors import StrataError
from strata_dagster.orchestration.constants import COMPANION_KIND, COMPANION_TAG, PARTITIONS_COMPANION
from strata_dagster.orchestration.jobs.executor import EXECUTOR_NAME
from strata_dagster_tests.support.dagster_support import SOURCES, day_keys, make_small_shop
from strata_dagster_tests.support.engine_support import SHOP
from strata_dagster_tests.support.paths import REPO

REPO = REPO
BETA_SECTION = "## Beta APIs strata uses"
MODELS = {
    "stg_orders": "staging",
    "stg_customers": "staging",
    "order_status_log": "staging",
    "first_seen_orders": "staging",
    "orders_enriched": "marts",
    "order_tags": "marts",
    "order_timeline": "marts",
    "daily_revenue": "marts",
    "monthly_revenue": "marts",
}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    return make_small_shop(tmp_path_factory.mktemp("definitions"))


@pytest.fixture(scope="module")
def defs(shop):
    project, warehouse = shop
    return build_definitions(project, warehouse=warehouse)


def test_every_source_and_model_is_an_asset_grouped_by_module_with_its_description(defs):
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == set(MODELS) | set(SOURCES) | {"stg_orders__by_day"}
    for name, group in MODELS.items():
        node = graph.get(dg.AssetKey(name))
        assert node.group_name == group
        assert node.description
        assert node.is_materializable
    for name in SOURCES:
        node = graph.get(dg.AssetKey(name))
        assert node.is_observable and node.group_name == "sources" and node.description


def test_code_versions_are_the_engine_fingerprints_and_deps_follow_the_pipelines(shop, defs):
    project, warehouse = shop
    graph = defs.resolve_asset_graph()
    states = model_states(project, warehouse)
    for name in MODELS:
        assert graph.get(dg.AssetKey(name)).code_version == states[name].fingerprint
    parents = {
        name: {key.to_user_string() for key in graph.get(dg.AssetKey(name)).parent_keys} for name in MODELS
    }
    assert parents["stg_orders"] == {"orders"}
    # daily_revenue reads stg_orders per day, through its partitions companion (see below).
    assert parents["daily_revenue"] == {"stg_orders__by_day", "stg_customers"}
    assert parents["monthly_revenue"] == {"daily_revenue"}
    assert parents["order_timeline"] == {"first_seen_orders", "order_status_log"}


def test_partitions_are_daily_and_monthly_over_the_days_of_the_data(defs):
    graph = defs.resolve_asset_graph()
    daily = graph.get(dg.AssetKey("daily_revenue")).partitions_def
    monthly = graph.get(dg.AssetKey("monthly_revenue")).partitions_def
    assert isinstance(daily, dg.DailyPartitionsDefinition)
    assert isinstance(monthly, dg.MonthlyPartitionsDefinition)
    assert daily.get_partition_keys() == day_keys()
    assert monthly.get_partition_keys() == ["2025-01-01", "2025-02-01"]
    assert graph.get(dg.AssetKey("stg_orders")).partitions_def is None


def test_every_asset_and_observation_runs_in_the_duckdb_pool_with_the_in_process_executor(defs):
    job = defs.resolve_implicit_global_asset_job_def()
    # Dagster's in-process executor behind the backfill guard (see test_dagster_backfill.py).
    assert job.executor_def.name == EXECUTOR_NAME
    assert job.executor_def.config_schema.as_field().config_type.key == (
        dg.in_process_executor.config_schema.as_field().config_type.key
    )
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():  # partitions companions too: they observe the warehouse
        op = graph.assets_def_for_key(key).op
        assert (op.pool or op.tags.get("dagster/concurrency_key")) == "duckdb", key


def test_a_day_partitioned_model_reads_its_unpartitioned_from_model_through_a_partitions_companion(defs):
    graph = defs.resolve_asset_graph()
    companion = graph.get(dg.AssetKey("stg_orders__by_day"))
    # An observable asset with daily_revenue's partitions, downstream of stg_orders (the lineage
    # stays); observed, never materialized.
    assert companion.is_observable and not companion.is_materializable
    assert companion.partitions_def == graph.get(dg.AssetKey("daily_revenue")).partitions_def
    assert companion.parent_keys == {dg.AssetKey("stg_orders")}
    assert companion.child_keys == {dg.AssetKey("daily_revenue")}
    assert companion.group_name == "staging" and companion.description
    assert companion.metadata["strata/readers"] == "daily_revenue"
    assert companion.tags["strata/companion"] == "partitions"
    # monthly_revenue reads a partitioned model: Dagster maps its days to months itself.
    assert graph.get(dg.AssetKey("monthly_revenue")).parent_keys == {dg.AssetKey("daily_revenue")}
    # In no job: nothing runs it, the sensors do not select it.
    for job in ("strata_unpartitioned", "strata_daily_revenue_partitions"):
        layer = defs.resolve_job_def(job).asset_layer
        assert companion.key not in layer.executable_asset_keys


def test_both_sensors_ship_stopped_and_every_asset_has_an_automation_condition(defs):
    sensor = defs.resolve_sensor_def("strata_automation")
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert (
        defs.resolve_sensor_def("strata_materialize_stale").default_status == dg.DefaultSensorStatus.STOPPED
    )
    graph = defs.resolve_asset_graph()
    for name in MODELS:
        assert graph.get(dg.AssetKey(name)).automation_condition is not None
    assert graph.get(dg.AssetKey("orders")).automation_condition is not None


def test_the_resource_names_the_fix_for_each_bad_setting(shop, tmp_path):
    project, warehouse = shop
    with pytest.raises(Exception, match="folder that holds the project's"):
        StrataResource(project_dir=str(tmp_path / "nowhere"), warehouse=str(warehouse))
    with pytest.raises(Exception, match="holds no \\*.strata module"):
        StrataResource(project_dir=str(tmp_path), warehouse=str(warehouse))
    with pytest.raises(Exception, match="is a folder"):
        StrataResource(project_dir=str(project), warehouse=str(tmp_path))
    with pytest.raises(Exception, match="cannot be a branch name"):
        StrataResource(project_dir=str(project), warehouse=str(warehouse), branch="no way")
    fields = StrataResource.model_fields
    assert all(fields[name].description for name in ("project_dir", "warehouse", "branch"))


def test_a_missing_warehouse_says_how_to_create_it(shop, tmp_path):
    project, _ = shop
    with pytest.raises(StrataError) as raised:
        build_definitions(project, warehouse=tmp_path / "missing.duckdb")
    assert raised.value.code == "E020" and "strata sample-data" in raised.value.hint


def test_the_translator_overrides_keys_groups_and_partitions(shop):
    project, warehouse = shop

    class Prefixed(StrataDagsterTranslator):
        def get_asset_key(self, props):
            return dg.AssetKey(["shop", props.name])

        def get_group_name(self, props):
            return "shop"

    defs = build_definitions(project, warehouse=warehouse, translator=Prefixed(is_open_ended_partitions=True))
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey(["shop", "monthly_revenue"]))
    assert node.group_name == "shop"
    assert {key.to_user_string() for key in node.parent_keys} == {"shop/daily_revenue"}
    # Open-ended partitions run on past the data, to the last complete day.
    assert len(graph.get(dg.AssetKey(["shop", "daily_revenue"])).partitions_def.get_partition_keys()) > 40


def test_importing_strata_dagster_does_not_import_dagster():
    import subprocess
    import sys

    code = "import sys, strata_dagster; assert 'dagster' not in sys.modules; strata_dagster.build_definitions"
    subprocess.run([sys.executable, "-c", code], check=True)


def _documented_beta_apis() -> str:
    text = (REPO / "docs" / "dagster.md").read_text()
    start = text.index(BETA_SECTION)
    end = text.find("\n## ", start + len(BETA_SECTION))
    return text[start : end if end != -1 else None]


def test_loading_the_shop_definitions_warns_only_of_the_beta_apis_the_docs_list(shop, monkeypatch):
    """Every load of a code location runs its definitions module: its beta warnings are Dagster's
    (not silenced), and each beta API it warns of is listed, with why, in docs/dagster.md. The
    automation condition selects the companions by their kind, a stable API."""
    _, warehouse = shop
    monkeypatch.setenv("STRATA_WAREHOUSE", str(warehouse))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        defs = runpy.run_path(str(SHOP / "definitions.py"))["defs"]
        graph = defs.resolve_asset_graph()
    beta = {str(warning.message) for warning in caught if issubclass(warning.category, dg.BetaWarning)}
    assert beta  # Dagster still warns: the day it stops, the list in the docs is shortened
    documented = _documented_beta_apis()
    for message in beta:
        names = [name.removesuffix(".__init__") for name in re.findall(r"`([^`]+)`", message)]
        assert names and all(f"`{name}`" in documented for name in names), (message, names)
    companions = dg.AssetSelection.kind(COMPANION_KIND, include_sources=True).resolve(graph)
    assert companions == {dg.AssetKey("stg_orders__by_day")}
    assert graph.get(dg.AssetKey("stg_orders__by_day")).tags[COMPANION_TAG] == PARTITIONS_COMPANION


def test_a_month_whose_data_ends_mid_month_reads_only_the_days_that_exist(defs):
    """With data ending on 2025-02-09, the month 2025-02 exists but its days after the 9th do not:
    Dagster must map it to the days that exist, or *Materialize all* refuses to launch ("depends on
    non-existent partitions daily_revenue [2025-02-10...2025-02-28]")."""
    graph = defs.resolve_asset_graph()
    month, day = dg.AssetKey("monthly_revenue"), dg.AssetKey("daily_revenue")
    months = graph.get(month).partitions_def
    days = graph.get(day).partitions_def
    last_month = months.get_last_partition_key()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no beta or deprecation warning on this path either
        result = graph.get_partition_mapping(month, day).get_upstream_mapped_partitions_result_for_partitions(
            months.subset_with_partition_keys([last_month]), months, days
        )
    assert result.required_but_nonexistent_subset.is_empty
    assert sorted(result.partitions_subset.get_partition_keys())[-1] == days.get_last_partition_key()
