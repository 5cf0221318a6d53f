"""`StrataProjectComponent`: a strata project as a Dagster Component, declared in a `defs.yaml`.

`dg scaffold defs strata_dagster.StrataProjectComponent strata --project-path <project>` writes
the defs.yaml; `dg list defs`, `dg check defs` and `dg dev` load it. The definitions are
`build_definitions`'s, so the two ways give the same assets, checks, jobs and sensors.
"""

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import BaseModel, Field

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.errors import E_COMPONENT, Location, StrataError
from strata_dagster.language.loader import has_modules
from strata_dagster.orchestration.checks import DEFAULT_VERIFICATION_SCHEDULE
from strata_dagster.orchestration.definitions import build_definitions
from strata_dagster.orchestration.failures import raises_cleanly
from strata_dagster.orchestration.gc_job import DEFAULT_GC_CRON, StrataGcPolicy
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

Status = Literal["stopped", "running"]


class StrataTranslation(dg.Model):
    """How sources and models become asset keys and groups (the translator's defaults otherwise)."""

    key_prefix: list[str] = Field(
        default_factory=list, description="Put every asset key under this prefix, e.g. [shop]."
    )
    group_name: str | None = Field(
        default=None, description="One group for every asset, instead of one group per .strata module."
    )
    open_ended_partitions: bool = Field(
        default=False,
        description="Time partitions run on to the last complete day or month instead of the last one in the data.",
    )


class StrataGcSchedule(dg.Model):
    """The retention job `strata_gc` (`strata gc --keep N --older-than AGE`) and its schedule."""

    keep: int | None = Field(default=None, description="Keep the snapshots of the last N runs.")
    older_than: str | None = Field(
        default=None, description="Keep the snapshots of runs younger than this: 12h, 30d, 2w."
    )
    compact: bool = Field(
        default=False, description="Then rewrite the warehouse file without its free space."
    )
    cron: str = Field(default=DEFAULT_GC_CRON, description="When strata_gc_schedule runs (UTC).")
    status: Status = Field(
        default="stopped", description="`running` starts the schedule when the code loads."
    )


class StrataScaffoldParams(BaseModel):
    project_path: str = Field(
        description="The strata project folder (relative to where dg runs, or absolute)."
    )
    warehouse: str | None = Field(
        default=None, description="The DuckDB file; default: in the project folder."
    )


class StrataProjectScaffolder(dg.Scaffolder[StrataScaffoldParams]):
    """Writes a defs.yaml naming the project (relative to the defs.yaml) with every attribute at its default."""

    @classmethod
    def get_scaffold_params(cls) -> type[StrataScaffoldParams]:
        return StrataScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[StrataScaffoldParams]) -> None:
        params = request.params
        target = request.target_path.resolve()
        target.mkdir(parents=True, exist_ok=True)
        attributes: dict[str, object] = {"project_path": _relative(params.project_path, target)}
        if params.warehouse is not None:
            attributes["warehouse"] = _relative(params.warehouse, target)
        attributes.update(
            branch=DEFAULT_BRANCH,
            translation={"key_prefix": [], "group_name": None, "open_ended_partitions": False},
            select=None,
            python_models=[],
            stale_sensor="stopped",
            verification_schedule=DEFAULT_VERIFICATION_SCHEDULE,
            verification_schedule_status="stopped",
            gc={
                "keep": 10,
                "older_than": "30d",
                "compact": False,
                "cron": DEFAULT_GC_CRON,
                "status": "stopped",
            },
        )
        dg.scaffold_component(request, attributes)


# scaffold_with also marks the class as a registry object, which `dg list components` lists.
@dg.scaffold_with(StrataProjectScaffolder)
class StrataProjectComponent(dg.Component, dg.Model, dg.Resolvable):
    """A strata project (a folder of .strata modules) as Dagster assets that build incrementally on
    immutable, versioned snapshots in DuckDB: the definitions of `strata_dagster.build_definitions`."""

    project_path: str = Field(
        description="The strata project folder, relative to this defs.yaml's folder (or absolute)."
    )
    warehouse: str | None = Field(
        default=None,
        description="The DuckDB file, relative to this defs.yaml's folder; default $STRATA_WAREHOUSE, "
        "else warehouse.duckdb in the project folder.",
    )
    branch: str = Field(default=DEFAULT_BRANCH, description="The branch whose views the assets publish.")
    translation: StrataTranslation | None = Field(
        default=None, description="Asset key prefix, one group for all, open-ended partitions."
    )
    select: str | None = Field(
        default=None,
        description="Only these models and the models they read, as `strata run --models` takes them "
        "(`daily_revenue`, `stg_*`, `tag:finance`, `+orders_enriched`); null: every model.",
    )
    python_models: list[str] = Field(
        default_factory=list,
        description="Modules (`pkg.module`) or objects (`pkg.module:name`) holding Python models and "
        "consumers of strata models (assets), added as build_definitions' python_assets.",
    )
    stale_sensor: Status = Field(
        default="stopped", description="The strata_materialize_stale sensor's default status."
    )
    verification_schedule: str | None = Field(
        default=DEFAULT_VERIFICATION_SCHEDULE,
        description="Cron (UTC) of strata_verify_schedule (incremental equals full); null: no schedule.",
    )
    verification_schedule_status: Status = Field(default="stopped", description="Its default status.")
    gc: StrataGcSchedule | None = Field(default=None, description="The retention job; none without it.")

    @raises_cleanly
    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        here = _folder(context.path)
        project = here / self.project_path
        if not has_modules(project):  # bounded: a folder as large as `/` is no project
            raise StrataError(
                E_COMPONENT,
                f"project_path `{self.project_path}` is not a folder of .strata modules (resolved to {project})",
                Location(str(here / "defs.yaml"), 1, 1),
                hint="give the strata project folder relative to this defs.yaml's folder, e.g. `project_path: ../../..`",
            )
        return build_definitions(
            project,
            warehouse=here / self.warehouse if self.warehouse is not None else None,
            branch=self.branch,
            translator=_translator(self.translation),
            python_assets=_python_assets(self.python_models, here),
            select=self.select,
            stale_sensor_status=_sensor_status(self.stale_sensor),
            verification_schedule=self.verification_schedule,
            verification_schedule_status=_schedule_status(self.verification_schedule_status),
            gc=None if self.gc is None else _gc_policy(self.gc),
            gc_schedule_status=_schedule_status(self.gc.status if self.gc else "stopped"),
        )


class _Translator(StrataDagsterTranslator):
    def __init__(self, translation: StrataTranslation) -> None:
        super().__init__(is_open_ended_partitions=translation.open_ended_partitions)
        self.prefix = list(translation.key_prefix)
        self.group_name = translation.group_name

    def get_asset_key(self, props: StrataAssetProps) -> dg.AssetKey:
        return super().get_asset_key(props).with_prefix(self.prefix)

    def get_whole_asset_key(self, props: StrataAssetProps) -> dg.AssetKey:
        return super().get_whole_asset_key(props).with_prefix(self.prefix)

    def get_partition_companion_key(self, props: StrataAssetProps, reader: StrataAssetProps) -> dg.AssetKey:
        return super().get_partition_companion_key(props, reader).with_prefix(self.prefix)

    def get_group_name(self, props: StrataAssetProps) -> str | None:
        return self.group_name or super().get_group_name(props)


def _translator(translation: StrataTranslation | None) -> StrataDagsterTranslator:
    return StrataDagsterTranslator() if translation is None else _Translator(translation)


def _python_assets(references: Sequence[str], here: Path) -> list[dg.AssetsDefinition]:
    found: list[dg.AssetsDefinition] = []
    for reference in references:
        module_name, _, attribute = reference.partition(":")
        try:
            module = importlib.import_module(module_name)
            values = [getattr(module, attribute)] if attribute else list(vars(module).values())
        except (ImportError, AttributeError) as error:
            raise StrataError(
                E_COMPONENT,
                f"python_models entry `{reference}` cannot be imported: {error}",
                Location(str(here / "defs.yaml"), 1, 1),
                hint="name a module of the dg project (`my_project.python_models`) or an object in it (`module:name`)",
            ) from None
        found.extend(value for value in values if isinstance(value, dg.AssetsDefinition))
    return list({id(item): item for item in found}.values())


def _gc_policy(schedule: StrataGcSchedule) -> StrataGcPolicy:
    return StrataGcPolicy(schedule.keep, schedule.older_than, schedule.compact, schedule.cron)


def _sensor_status(status: Status) -> dg.DefaultSensorStatus:
    return dg.DefaultSensorStatus.RUNNING if status == "running" else dg.DefaultSensorStatus.STOPPED


def _schedule_status(status: Status) -> dg.DefaultScheduleStatus:
    return dg.DefaultScheduleStatus.RUNNING if status == "running" else dg.DefaultScheduleStatus.STOPPED


def _folder(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def _relative(path: str, target: Path) -> str:
    return os.path.relpath(Path(path).resolve(), target)
