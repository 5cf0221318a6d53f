"""The Dagster layer: a strata project as Dagster assets (the only package besides cli that imports
dagster). Start with `build_definitions`; see docs/dagster.md.

Laid out by Dagster concept: `assets/` (sources, the models' multi-assets, Python models,
partitions and their companions), `checks/`, `sensors/` (the stale sensor, automation
conditions), `jobs/` (asset, backfill, one-run and gc jobs, their schedules, the executor),
`resources/`, `io/` (the IO manager, frames, dagster-pandas types), `component/`. Dagster's public
API only."""

from strata_dagster.orchestration.assets.python_models import strata_python_model
from strata_dagster.orchestration.component import StrataProjectComponent
from strata_dagster.orchestration.definitions import build_definitions
from strata_dagster.orchestration.io.io_manager import StrataIOManager
from strata_dagster.orchestration.jobs.gc import StrataGcPolicy
from strata_dagster.orchestration.resources import StrataDuckDBResource, StrataResource
from strata_dagster.orchestration.sensors.automation import (
    automation_sensor,
    observation_condition,
    stale_condition,
)
from strata_dagster.orchestration.sensors.stale_sensor import plan_stale_runs, stale_partitions_sensor
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

__all__ = [
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
