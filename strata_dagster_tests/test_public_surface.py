"""What strata_dagster promises to its users (docs/architecture.md, Public surface), pinned: a name
added, renamed or removed here is a deliberate change of the public surface, made in this file too."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import strata_dagster
from strata_dagster.engine import plan as engine_plan
from strata_dagster.engine import run as engine_run

PACKAGE = [
    "StrataDagsterTranslator",
    "StrataDuckDBResource",
    "StrataError",
    "StrataGcPolicy",
    "StrataIOManager",
    "StrataProjectComponent",
    "StrataResource",
    "build_definitions",
    "strata_python_model",
]

ORCHESTRATION = [
    "StrataAssetProps",
    "StrataDagsterTranslator",
    "StrataDuckDBResource",
    "StrataGcPolicy",
    "StrataIOManager",
    "StrataProjectComponent",
    "StrataResource",
    "automation_sensor",
    "build_definitions",
    "observation_condition",
    "plan_stale_runs",
    "stale_condition",
    "stale_partitions_sensor",
    "strata_python_model",
]

BUILD_DEFINITIONS = [
    "project_dir",
    "warehouse",
    "branch",
    "name",
    "translator",
    "python_assets",
    "stale_sensor_status",
    "verification_schedule",
    "verification_schedule_status",
    "gc",
    "gc_schedule_status",
    "select",
    "backend",
    "spark_remote",
    "engine",  # the former name of `backend`
]

STRATA_RESOURCE = ["project_dir", "warehouse", "backend", "engine", "spark_remote", "branch"]

# Benchmarks outside the package call these (a run and a plan of a project, as values).
ENGINE_RUN = ["ModelOutcome", "NOTHING_TO_DO", "RunRequest", "RunResult", "run", "run_project"]
ENGINE_PLAN = ["ModelPlan", "Plan", "plan", "plan_project"]
RUN_REQUEST = [
    "project_dir",
    "warehouse",
    "models",
    "branch",
    "overrides",
    "only_stale",
    "full_refresh",
    "kind",
    "backfill_of",
    "reason",
    "now",
    "partitions",
]

COMMANDS = [
    "backfill",
    "branch",
    "check",
    "compile",
    "connect",
    "doctor",
    "gc",
    "history",
    "plan",
    "promote",
    "replay",
    "retire",
    "rollback",
    "run",
    "sample-data",
    "show",
    "test",
    "verify",
]


def test_the_package_exports_the_dagster_entry_points_and_strata_error():
    assert sorted(strata_dagster.__all__) == PACKAGE
    from strata_dagster import orchestration

    for name in PACKAGE:
        exported = getattr(strata_dagster, name)
        assert exported is (
            strata_dagster.StrataError if name == "StrataError" else getattr(orchestration, name)
        )


def test_importing_the_package_alone_imports_no_dagster():
    code = "import sys, strata_dagster; print('dagster' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


def test_the_dagster_layer_exports_its_entry_points():
    from strata_dagster import orchestration

    assert sorted(orchestration.__all__) == ORCHESTRATION
    public = {name for name in vars(orchestration) if not name.startswith("_")}
    submodules = {name for name in public if inspect.ismodule(getattr(orchestration, name))}
    assert sorted(public - submodules) == ORCHESTRATION


def test_build_definitions_and_the_resource_take_these_settings():
    from strata_dagster.orchestration import StrataResource, build_definitions

    parameters = inspect.signature(build_definitions).parameters
    assert list(parameters) == BUILD_DEFINITIONS
    assert all(p.kind is p.KEYWORD_ONLY for name, p in parameters.items() if name != "project_dir")
    assert list(StrataResource.model_fields) == STRATA_RESOURCE


def test_the_engine_entry_points_benchmarks_call():
    for module, names in ((engine_run, ENGINE_RUN), (engine_plan, ENGINE_PLAN)):
        assert all(hasattr(module, name) for name in names), module.__name__
    assert [field.name for field in dataclasses.fields(engine_run.RunRequest)] == RUN_REQUEST
    assert list(inspect.signature(engine_run.run).parameters)[:1] == ["request"]
    assert list(inspect.signature(engine_plan.plan).parameters)[:1] == ["request"]


def test_the_strata_command_has_these_commands():
    from strata_dagster.cli.main import main

    assert sorted(main.commands) == COMMANDS
