"""The Dagster layer uses Dagster's public API only: ruff bans every private `dagster._` module in
every module of it (orchestration/ruff.toml, no exception), no module imports one or reaches a
private member, and the event-log tags strata writes and reads are where Dagster expects them
(this test fails, naming one, when Dagster moves it)."""

import ast
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import tomllib

from strata_dagster.orchestration import constants as c
from strata_dagster_tests.support.paths import REPO

REPO = REPO
LAYER = REPO / "strata_dagster" / "orchestration"
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
    return sorted((REPO / "strata_dagster").rglob("*.py"))


def test_ruff_passes_and_bans_private_dagster_modules_in_every_module_of_the_dagster_layer():
    subprocess.run([str(RUFF), "check", "strata_dagster"], cwd=REPO, check=True, capture_output=True)
    probe = "from dagster._core.definitions.data_version import StaleStatus\n\nprint(StaleStatus)\n"
    for name in (
        "assets/models.py",
        "sensors/stale_sensor.py",
        "sensors/stale_status.py",
        "dagster_private.py",
    ):
        found = subprocess.run(
            [str(RUFF), "check", "--stdin-filename", f"strata_dagster/orchestration/{name}", "-"],
            cwd=REPO,
            input=probe,
            capture_output=True,
            text=True,
        )
        assert found.returncode == 1 and "TID251" in found.stdout, found.stdout


def test_ruff_bans_every_private_module_of_the_installed_dagster():
    """ruff bans a module by name: each of dagster's private top-level modules is listed, and no
    file of the layer is exempt."""
    config = tomllib.loads((LAYER / "ruff.toml").read_text())
    banned = set(config["lint"]["flake8-tidy-imports"]["banned-api"])
    package = Path(dg.__file__).parent
    private = {
        f"dagster.{path.name.removesuffix('.py')}"
        for path in package.iterdir()
        if path.name.startswith("_") and not path.name.startswith("__")
    }
    assert private, package
    assert private - banned == set()
    assert "per-file-ignores" not in config["lint"]


@pytest.mark.parametrize("path", _layer_modules(), ids=lambda path: str(path.relative_to(REPO)))
def test_no_module_imports_private_dagster_or_reaches_a_private_member(path):
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


def _is_private(module: str) -> bool:
    return module.startswith(("dagster._", "dagster_shared"))


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
