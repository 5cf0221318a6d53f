"""The Dagster layer uses Dagster's public API only, except `orchestration/dagster_private.py`:
ruff bans every private `dagster._` module elsewhere (orchestration/ruff.toml), no other module
imports one or reaches a private member, importing strata_dagster, loading the definitions and
running its models do not import dagster_private, and every private name dagster_private and the
event-log tags rely on is where it expects it (this test fails, naming it, when Dagster moves one)."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration import dagster_private
from strata_dagster_tests.support.paths import REPO

REPO = REPO
LAYER = REPO / "strata_dagster" / "orchestration"
PRIVATE_MODULE = LAYER / "dagster_private.py"
RUFF = Path(sys.executable).with_name("ruff")
# Members of public Dagster objects that are not Dagster's public API.
PRIVATE_MEMBERS = {
    "dagster_internal_init",
    "step_context",
    "set_data_version",
    "wipe_input_asset_version_info",
    "get_inner_queryer_for_back_compat",
    "execution_plan",
}


def _layer_modules() -> list[Path]:
    return sorted(path for path in (REPO / "strata_dagster").rglob("*.py") if path != PRIVATE_MODULE)


def test_ruff_passes_and_bans_private_dagster_modules_in_the_dagster_layer():
    subprocess.run([str(RUFF), "check", "strata_dagster"], cwd=REPO, check=True, capture_output=True)
    probe = "from dagster._core.definitions.data_version import StaleStatus\n\nprint(StaleStatus)\n"
    for name in ("assets/models.py", "sensors/stale_sensor.py"):
        found = subprocess.run(
            [str(RUFF), "check", "--stdin-filename", f"strata_dagster/orchestration/{name}", "-"],
            cwd=REPO,
            input=probe,
            capture_output=True,
            text=True,
        )
        assert found.returncode == 1 and "TID251" in found.stdout, found.stdout
    allowed = subprocess.run(
        [str(RUFF), "check", "--stdin-filename", "strata_dagster/orchestration/dagster_private.py", "-"],
        cwd=REPO,
        input=probe,
        capture_output=True,
        text=True,
    )
    assert "TID251" not in allowed.stdout


@pytest.mark.parametrize("path", _layer_modules(), ids=lambda path: str(path.relative_to(REPO)))
def test_no_other_module_imports_private_dagster_or_reaches_a_private_member(path):
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_private(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and _is_private(node.module):
            found.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_MEMBERS:
            found.append(f".{node.attr}")
    assert found == [], f"{path.relative_to(REPO)} uses Dagster's private API: {found}"
    # dagster_private is imported where its feature runs, inside a function, never at module level.
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.endswith("dagster_private"), path


def _is_private(module: str) -> bool:
    return module.startswith(("dagster._", "dagster_shared"))


def test_dagster_private_names_are_where_it_expects_them():
    for module, names in dagster_private.PRIVATE_NAMES.items():
        imported = importlib.import_module(module)
        for name in names:
            assert hasattr(imported, name), f"Dagster moved {module}.{name}: update dagster_private.py"
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus

    assert callable(CachingStaleStatusResolver.get_status) and callable(
        CachingStaleStatusResolver.get_stale_causes
    )
    assert StaleStatus.STALE.value == "STALE"


def test_the_event_log_tags_strata_writes_are_dagsters():
    """Dagster reads provenance from these tags; their names are its event-log format."""
    from dagster._core.definitions import data_version
    from dagster._core.storage import tags

    assert c.DATA_VERSION_TAG == data_version.DATA_VERSION_TAG
    assert c.CODE_VERSION_TAG == data_version.CODE_VERSION_TAG
    assert c.DATA_VERSION_IS_USER_PROVIDED_TAG == data_version.DATA_VERSION_IS_USER_PROVIDED_TAG
    assert c.INPUT_DATA_VERSION_TAG_PREFIX == data_version.INPUT_DATA_VERSION_TAG_PREFIX
    assert c.INPUT_EVENT_POINTER_TAG_PREFIX == data_version.INPUT_EVENT_POINTER_TAG_PREFIX
    assert c.NULL_EVENT_POINTER == data_version.NULL_EVENT_POINTER
    assert c.BACKFILL_ID_TAG == tags.BACKFILL_ID_TAG
    assert c.RANGE_START_TAG == tags.ASSET_PARTITION_RANGE_START_TAG
    assert c.RANGE_END_TAG == tags.ASSET_PARTITION_RANGE_END_TAG
    assert data_version.DEFAULT_DATA_VERSION.value == "INITIAL"


RUN_WITHOUT_PRIVATE = """
import sys
import dagster as dg
from strata_dagster import build_definitions, strata_python_model

@strata_python_model(code_version="1", contract={{"region": "VARCHAR not null"}})
def regions(orders_enriched):
    return orders_enriched.select("region").unique()

defs = build_definitions({project!r}, warehouse={warehouse!r}, python_assets=[regions])
dg.Definitions.validate_loadable(defs)
graph = defs.resolve_asset_graph()
days = graph.get(dg.AssetKey("daily_revenue")).partitions_def.get_partition_keys()
instance = dg.DagsterInstance.ephemeral()
for names, tags in (
    (["orders", "customers"], {{}}),
    (["stg_orders", "stg_customers", "orders_enriched", "regions", "daily_revenue"], {{}}),
):
    keys = [dg.AssetKey(name) for name in names]
    partitioned = "daily_revenue" in names
    for selection in ([k for k in keys if k.path[-1] != "daily_revenue"], [dg.AssetKey("daily_revenue")]):
        job = defs.resolve_implicit_job_def_def_for_assets(selection)
        run_tags = {{"dagster/asset_partition_range_start": days[0], "dagster/asset_partition_range_end": days[-1]}} if selection == [dg.AssetKey("daily_revenue")] else {{}}
        assert job.execute_in_process(instance=instance, asset_selection=selection, tags=run_tags).success
print("loaded" if "strata_dagster.orchestration.dagster_private" in sys.modules else "not loaded")
"""


def test_loading_the_definitions_and_running_models_and_their_checks_do_not_import_dagster_private(tmp_path):
    from strata_dagster_tests.support.dagster_support import make_small_shop

    project, warehouse = make_small_shop(tmp_path, rows=300, days=4)
    code = RUN_WITHOUT_PRIVATE.format(project=str(project), warehouse=str(warehouse))
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr[-3000:]
    assert found.stdout.strip().splitlines()[-1] == "not loaded"


def test_the_stale_sensors_tick_reads_dagsters_stale_status_through_dagster_private(tmp_path):
    """The feature that needs it imports it: the stale status a tick reads."""
    code = (
        "import sys\nfrom strata_dagster.orchestration.sensors.stale_sensor import plan_stale_runs\n"
        "import dagster as dg\n"
        "plan_stale_runs(dg.DagsterInstance.ephemeral(), dg.Definitions().resolve_asset_graph(), {}, {})\n"
        "print('strata_dagster.orchestration.dagster_private' in sys.modules)\n"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip().splitlines()[-1] == "True"
    assert dg.AssetKey  # the public API the rest of the layer uses


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_dagster_layer_has_no_import_cycle():
    """Module-level imports between the layer's modules (a package's `__init__` included, a
    `from package import submodule` counting as the submodule) form no cycle."""
    modules = {_module_name(path): path for path in LAYER.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.parse(path.read_text()).body:
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module:
                submodules = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [item for item in submodules if item in modules] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            found |= {target for target in targets if target in modules and target != name}
        edges[name] = found
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        if seen.get(name) == 2:
            return
        assert seen.get(name) != 1, " -> ".join([*path[path.index(name) :], name])
        seen[name] = 1
        for target in sorted(edges[name]):
            visit(target, [*path, name])
        seen[name] = 2

    for name in sorted(modules):
        visit(name, [])
