"""The Dagster layer: a strata project as Dagster assets (the only package besides cli that imports
dagster). Start with `build_definitions`; see docs/dagster.md."""

from strata_dagster.orchestration.automation import automation_sensor, observation_condition, stale_condition
from strata_dagster.orchestration.build import StrataBuild, StrataBuildInput
from strata_dagster.orchestration.component import StrataProjectComponent
from strata_dagster.orchestration.definitions import build_definitions
from strata_dagster.orchestration.gc_job import StrataGcPolicy
from strata_dagster.orchestration.io_manager import StrataIOManager
from strata_dagster.orchestration.python_models import strata_python_model
from strata_dagster.orchestration.resources import StrataResource
from strata_dagster.orchestration.stale_sensor import plan_stale_runs, stale_partitions_sensor
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

__all__ = [
    "StrataAssetProps",
    "StrataBuild",
    "StrataBuildInput",
    "StrataDagsterTranslator",
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
