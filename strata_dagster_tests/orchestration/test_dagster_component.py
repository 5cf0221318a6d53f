"""`strata_dagster.StrataProjectComponent` as a dg user meets it: `dg list components` lists it,
`dg scaffold defs ... --project-path` writes the defs.yaml the example ships, and `dg list defs` /
`dg check defs` (real subprocesses, offline) load the example's dg project with the assets
`build_definitions` gives. One scaffolded project is shared by the module: each dg command
imports Dagster (seconds)."""

import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run

from strata_dagster import build_definitions
from strata_dagster.engine.sources.readings import peek_live_contents
from strata_dagster.errors import E_COMPONENT, StrataError
from strata_dagster_tests.support.dagster_support import START, make_small_shop
from strata_dagster_tests.support.engine_support import SHOP
from strata_dagster_tests.support.paths import REPO

REPO = REPO
DG = Path(sys.executable).with_name("dg")
DEFS = Path("shop_dagster/defs/strata/defs.yaml")


def run_dg(project: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "DAGSTER_HOME": str(home),  # its dagster.yaml turns telemetry off
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "NO_COLOR": "1",
    }
    result = subprocess.run(
        [str(DG), *args], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"dg {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def dg_project(tmp_path_factory):
    """The example's dg project over a small warehouse, its strata component scaffolded anew."""
    root = tmp_path_factory.mktemp("dg")
    small, warehouse = make_small_shop(root, rows=300, days=5)
    project = root / "shop_dg"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "__pycache__"))
    shutil.move(warehouse, project / "warehouse.duckdb")
    home = root / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    shutil.rmtree(project / DEFS.parent)
    run_dg(
        project,
        home,
        "scaffold",
        "defs",
        "strata_dagster.StrataProjectComponent",
        "strata",
        "--project-path",
        ".",
    )
    return project, home


def test_dg_lists_the_component(dg_project):
    project, home = dg_project
    listed = json.loads(run_dg(project, home, "list", "components", "--json").stdout)
    keys = {item["key"] for item in listed["items"]}
    assert "strata_dagster.StrataProjectComponent" in keys


def test_scaffold_writes_the_defs_yaml_the_example_ships(dg_project):
    project, _ = dg_project
    written = yaml.safe_load((project / DEFS).read_text())
    shipped = yaml.safe_load((SHOP / DEFS).read_text())
    assert written["type"] == shipped["type"] == "strata_dagster.StrataProjectComponent"
    assert written["attributes"]["project_path"] == "../../.."  # relative to the defs.yaml
    # The example adds its Python model; every other attribute is the scaffold's default.
    assert shipped["attributes"].pop("python_models") == ["shop_dagster.python_models"]
    assert written["attributes"].pop("python_models") == []
    assert written["attributes"] == shipped["attributes"]


def test_dg_list_and_check_defs_load_what_build_definitions_gives(dg_project):
    project, home = dg_project
    listed = json.loads(run_dg(project, home, "list", "defs", "--json").stdout)
    run_dg(project, home, "check", "defs")
    defs = build_definitions(project, warehouse=project / "warehouse.duckdb")
    graph = defs.resolve_asset_graph()
    assert {item["asset_key"] for item in listed["assets"]} == {
        key.to_user_string() for key in graph.get_all_asset_keys()
    }
    assert {item["name"] for item in listed["jobs"]} == {job.name for job in defs.resolve_all_job_defs()} - {
        "__ASSET_JOB"
    } | {"strata_gc"}
    assert {item["name"] for item in listed["schedules"]} == {"strata_verify_schedule", "strata_gc_schedule"}
    assert {item["name"] for item in listed["sensors"]} == {sensor.name for sensor in defs.sensors or []}


def load_component(root: Path, package: str, attributes: str, monkeypatch) -> dg.Definitions:
    """A dg project `root` whose defs folder holds one defs.yaml of the component with
    `attributes`, loaded in process as `dg dev` loads it (dg.load_from_defs_folder)."""
    (root / "pyproject.toml").write_text(
        f'[tool.dg]\ndirectory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
    )
    folder = root / package / "defs" / "strata"
    folder.mkdir(parents=True)
    (root / package / "__init__.py").touch()
    (folder / "defs.yaml").write_text(
        "type: strata_dagster.StrataProjectComponent\nattributes:\n"
        + "".join(f"  {line}\n" for line in attributes.splitlines())
    )
    monkeypatch.syspath_prepend(str(root))
    return dg.load_from_defs_folder(project_root=root)


def test_the_component_builds_the_definitions_of_build_definitions(tmp_path, monkeypatch):
    project, warehouse = make_small_shop(tmp_path, rows=200, days=3)
    defs = load_component(
        tmp_path,
        "strata_component_case",
        "project_path: ../../../shop\nwarehouse: ../../../warehouse.duckdb\n"
        "translation: {key_prefix: [shop], group_name: strata}\n"
        "gc: {keep: 3, status: running}\nverification_schedule: null",
        monkeypatch,
    )
    plain = build_definitions(project, warehouse=warehouse).resolve_asset_graph()
    graph = defs.resolve_asset_graph()
    assert {key.with_prefix(["shop"]) for key in plain.get_all_asset_keys()} == set(
        graph.get_all_asset_keys()
    )
    assert {graph.get(key).group_name for key in graph.materializable_asset_keys} == {"strata"}
    assert defs.resolve_schedule_def("strata_gc_schedule").default_status == dg.DefaultScheduleStatus.RUNNING
    assert {schedule.name for schedule in defs.schedules or []} == {"strata_gc_schedule"}
    daily = graph.get(dg.AssetKey(["shop", "daily_revenue"]))
    assert START.isoformat() in daily.partitions_def.get_partition_keys()
    # Companions are translated too: the partitioned reader depends on the prefixed companion.
    assert dg.AssetKey(["shop", "stg_orders__by_day"]) in daily.parent_keys


@pytest.mark.parametrize(
    ("package", "attributes"),
    [
        ("strata_component_missing", "project_path: nowhere"),
        ("strata_component_bad_python", "project_path: ../../../shop\npython_models: [no_such.module]"),
    ],
)
def test_a_project_path_without_modules_or_a_missing_python_model_is_e067(
    tmp_path, monkeypatch, package, attributes
):
    make_small_shop(tmp_path, rows=50, days=2)
    with pytest.raises(Exception) as caught:
        load_component(tmp_path, package, attributes, monkeypatch)
    error = caught.value
    while error is not None and not isinstance(error, StrataError):
        error = error.__cause__ or error.__context__
    assert error is not None and error.code == E_COMPONENT
    # dg shows it under its own load error: strata's message, no strata frame below build_defs.
    ours = [
        frame.filename
        for frame in traceback.extract_tb(error.__traceback__)
        if "/strata_dagster/" in frame.filename
    ]
    assert all(name.endswith("orchestration/failures.py") for name in ours), ours


def test_select_keeps_the_selected_models_and_the_models_they_read(tmp_path, monkeypatch):
    make_small_shop(tmp_path, rows=200, days=3)
    defs = load_component(
        tmp_path,
        "strata_component_select",
        "project_path: ../../../shop\nwarehouse: ../../../warehouse.duckdb\nselect: 'monthly_revenue,order_tags'",
        monkeypatch,
    )
    graph = defs.resolve_asset_graph()
    assert {key.to_user_string() for key in graph.materializable_asset_keys} == {
        "monthly_revenue",
        "daily_revenue",
        "stg_orders",
        "stg_customers",
        "order_tags",
    }
    # The sources stay, and daily_revenue still reads stg_orders per day through its companion.
    assert {"orders", "customers", "stg_orders__by_day"} <= {
        key.to_user_string() for key in graph.get_all_asset_keys()
    }
    dg.Definitions.validate_loadable(defs)
    with pytest.raises(StrataError) as caught:
        build_definitions(tmp_path / "shop", warehouse=tmp_path / "warehouse.duckdb", select="monthly_revenu")
    assert caught.value.code == "E025"


TWO_COMPONENTS = {
    "one": (
        "warehouse.duckdb",
        'translation:\n  key_prefix: [one]\n  group_name: "{{ node.module }}_one"',
    ),
    "two": (
        "second.duckdb",
        'translation:\n  key: "two/{{ node.name }}"\n  tags: {team: "{{ node.kind }}s"}',
    ),
}


def load_components(root: Path, package: str, monkeypatch) -> dg.Definitions:
    """A dg project whose defs folder holds one component per entry of TWO_COMPONENTS (the shop
    project on two warehouses), loaded in process as `dg dev` loads it."""
    (root / "pyproject.toml").write_text(
        f'[tool.dg]\ndirectory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
    )
    (root / package).mkdir()
    (root / package / "__init__.py").touch()
    for name, (warehouse, translation) in TWO_COMPONENTS.items():
        folder = root / package / "defs" / name
        folder.mkdir(parents=True)
        (folder / "defs.yaml").write_text(
            "type: strata_dagster.StrataProjectComponent\nattributes:\n"
            f"  project_path: ../../../shop\n  warehouse: ../../../{warehouse}\n  name: {name}\n"
            + "".join(f"  {line}\n" for line in translation.splitlines())
        )
    monkeypatch.syspath_prepend(str(root))
    return dg.load_from_defs_folder(project_root=root)


def test_two_components_in_one_code_location_load_and_materialize_side_by_side(tmp_path, monkeypatch):
    project, warehouse = make_small_shop(tmp_path, rows=300, days=3)
    shutil.copy(warehouse, tmp_path / "second.duckdb")
    defs = load_components(tmp_path, "strata_two_components", monkeypatch)
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    # Resource keys, jobs, sensors and schedules are each project's own.
    assert {"strata_one", "strata_one_io_manager", "strata_two", "strata_two_io_manager"} <= set(
        defs.resources
    )
    jobs = {job.name for job in defs.resolve_all_job_defs()}
    assert {"strata_one_unpartitioned", "strata_two_unpartitioned", "strata_one_backfill"} <= jobs
    assert {sensor.name for sensor in defs.sensors or []} == {
        "strata_one_materialize_stale",
        "strata_one_automation",
        "strata_two_materialize_stale",
        "strata_two_automation",
    }
    assert {schedule.name for schedule in defs.schedules or []} == {
        "strata_one_verify_schedule",
        "strata_two_verify_schedule",
    }
    # The translation is Dagster's templated asset attributes.
    assert graph.get(dg.AssetKey(["one", "stg_orders"])).group_name == "staging_one"
    assert graph.get(dg.AssetKey(["two", "stg_orders"])).tags["team"] == "models"
    assert graph.get(dg.AssetKey(["two", "orders"])).tags["team"] == "sources"
    # Both materialize, each into its own warehouse, through the code location's executor.
    with dg.instance_for_test() as instance:
        for name, (file, _) in TWO_COMPONENTS.items():
            sources = [dg.AssetKey([name, source]) for source in ("orders", "customers")]
            models = [
                key
                for key in graph.materializable_asset_keys
                if key.path[0] == name and graph.get(key).partitions_def is None
            ]
            for keys in (sources, models):
                job = defs.resolve_implicit_job_def_def_for_assets(keys)
                run = instance.create_run_for_job(job, asset_selection=frozenset(keys))
                execute_run(InMemoryJob(job), run, instance)
                assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS
            live = peek_live_contents(tmp_path / file, ["stg_orders", "orders_enriched"], timeout=10)
            for model, content in live.items():
                record = instance.get_latest_data_version_record(dg.AssetKey([name, model]))
                assert content is not None
                assert record.event_log_entry.tags["dagster/data_version"] == content
        # A backfill of one project's models without a reason is refused before any step; the
        # other project's runs are not its business.
        keys = [dg.AssetKey(["one", "stg_orders"])]
        job = defs.resolve_implicit_job_def_def_for_assets(keys)
        run = instance.create_run_for_job(
            job, asset_selection=frozenset(keys), tags={"dagster/backfill": "x"}
        )
        execute_run(InMemoryJob(job), run, instance)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
