"""deploy/: the production stack as containers (docker-compose.yml, its Dockerfile, the instance's
dagster.yaml and the workspace) says what the production-stack journeys run: the same processes
with the same arguments, the PostgreSQL settings the instance reads, the code location the
workspace names, and the warehouse on a volume where the processes that open it run. Checked by
reading the files (no Docker engine here)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from strata_dagster_tests.support.production_stack import (
    DEPLOY,
    LOCATION,
    POOL,
    POSTGRES_ENV,
    REPO,
    code_server_command,
    daemon_command,
    instance_config,
    webserver_command,
)

DAGSTER_SERVICES = ("init", "code_server", "webserver", "daemon")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def image() -> dict[str, list[str]]:
    """The Dockerfile's instructions: keyword -> the arguments of each."""
    instructions: dict[str, list[str]] = {}
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            instructions.setdefault(keyword, []).append(arguments.strip())
    return instructions


def as_run(command: list[str]) -> list[str]:
    """A harness command as the container runs it: its console script by name, on the PATH."""
    return [Path(command[0]).name, *command[1:]]


def home_of(image: dict[str, list[str]]) -> str:
    (home,) = [value.split("=", 1)[1] for value in image["ENV"] if value.startswith("DAGSTER_HOME=")]
    return home


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_services_run_the_stacks_processes_with_the_harness_arguments(compose, image):
    services = compose["services"]
    assert set(services) == {"postgres", *DAGSTER_SERVICES}
    workspace = f"{home_of(image)}/workspace.yaml"
    code = services["code_server"]["command"]
    app = option(code, "--working-directory")
    assert code == as_run(
        code_server_command("0.0.0.0", int(option(code, "--port")), f"{app}/definitions.py", app)
    )
    assert services["webserver"]["command"] == as_run(webserver_command("0.0.0.0", 3000, workspace))
    assert services["daemon"]["command"] == as_run(daemon_command(workspace))
    assert services["init"]["command"] == ["dagster", "instance", "concurrency", "set", POOL, "1"]
    # The daemon starts once the pool's limit is set, as the harness sets it before any server.
    assert services["daemon"]["depends_on"]["init"]["condition"] == "service_completed_successfully"
    # One image for every Dagster process, built from the repository's root.
    for name in DAGSTER_SERVICES:
        assert services[name]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}


def test_the_workspace_names_the_code_servers_service_port_and_location(compose):
    (entry,) = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())["load_from"]
    server = entry["grpc_server"]
    code = compose["services"]["code_server"]["command"]
    assert server["host"] in compose["services"] and server["host"] == "code_server"
    assert str(server["port"]) == option(code, "--port")
    assert server["location_name"] == option(code, "--location-name") == LOCATION


def test_the_instance_reads_the_postgres_services_settings_from_every_dagster_process(compose):
    config = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    read = config["storage"]["postgres"]["postgres_db"]
    assert {value["env"] for value in read.values() if isinstance(value, dict)} == set(POSTGRES_ENV)
    postgres = compose["services"]["postgres"]["environment"]
    for name in DAGSTER_SERVICES:
        environment = compose["services"][name]["environment"]
        assert environment["DAGSTER_POSTGRES_HOST"] == "postgres"
        assert environment["DAGSTER_POSTGRES_PORT"] == "5432"
        assert environment["DAGSTER_POSTGRES_USER"] == postgres["POSTGRES_USER"]
        assert environment["DAGSTER_POSTGRES_PASSWORD"] == postgres["POSTGRES_PASSWORD"]
        assert environment["DAGSTER_POSTGRES_DB"] == postgres["POSTGRES_DB"]
        assert environment["DAGSTER_DISABLE_TELEMETRY"] == "1"
    assert config["telemetry"] == {"enabled": False}
    # Stock Dagster: no instance class, run launcher or section of strata's.
    assert not {"instance_class", "run_launcher", "strata"} & set(config)
    # The journeys run this very file (their PostgreSQL or SQLite storage, shorter intervals).
    assert instance_config(True, {})["storage"] == config["storage"]
    assert config["run_monitoring"]["enabled"] is True


def test_the_warehouse_is_on_a_volume_where_the_processes_that_open_it_run(compose):
    services = compose["services"]
    warehouse = Path(services["code_server"]["environment"]["STRATA_WAREHOUSE"])
    mounts = {
        name: dict(volume.split(":", 1)[::-1] for volume in service.get("volumes", []))
        for name, service in services.items()
    }
    # The DuckDB file and its .snapshots and .serving folders sit side by side: the folder is the volume.
    assert mounts["code_server"][str(warehouse.parent)] == "warehouse"
    assert "warehouse" in compose["volumes"] and "postgres" in compose["volumes"]
    assert mounts["postgres"]["/var/lib/postgresql/data"] == "postgres"
    # The webserver and the daemon reach the code location over gRPC; neither opens the warehouse.
    assert "warehouse" not in mounts["webserver"].values() and "warehouse" not in mounts["daemon"].values()


def test_the_image_copies_what_exists_and_installs_the_package(image):
    for arguments in image["COPY"]:
        *sources, _target = shlex.split(arguments)
        for source in sources:
            assert (REPO / source).exists(), source
    assert "pip install --no-cache-dir /src" in image["RUN"]
    assert any(target.endswith("/dagster_home/") for target in (shlex.split(c)[-1] for c in image["COPY"]))
