"""`StrataProjectComponent`: a strata project as a Dagster Component, declared in a `defs.yaml`.

`dg scaffold defs strata_dagster.StrataProjectComponent strata --project-path <project>` writes
the defs.yaml; `dg list defs`, `dg check defs` and `dg dev` load it. The definitions are
`build_definitions`'s, so the two ways give the same assets, checks, jobs and sensors. Several
components (several projects, or one project on several warehouses) share a code location when
each has its own `name`.

`translation` follows Dagster's convention for components (as dagster-dbt's and dagster-sling's):
asset attributes, templated with `{{ node.name }}`, `{{ node.kind }}` (source or model),
`{{ node.module }}`, ... (the fields of `StrataAssetProps`) and `{{ spec }}` (the default spec):

    translation:
      key: "shop/{{ node.name }}"
      group_name: "{{ node.module }}"
      tags: {team: analytics}
"""

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import dagster as dg
from dagster.components.utils.translation import TranslationFn, TranslationFnResolver
from pydantic import BaseModel, Field

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.errors import E_COMPONENT, Location, StrataError
from strata_dagster.language.loader import has_modules
from strata_dagster.orchestration.checks.model_checks import DEFAULT_VERIFICATION_SCHEDULE
from strata_dagster.orchestration.component.translation import TemplatedTranslator
from strata_dagster.orchestration.definitions import build_definitions
from strata_dagster.orchestration.failures import raises_cleanly
from strata_dagster.orchestration.jobs.gc import DEFAULT_GC_CRON, StrataGcPolicy
from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator

Status = Literal["stopped", "running"]


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
            name=None,
            translation=None,
            open_ended_partitions=False,
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
    name: str | None = Field(
        default=None,
        description="The project's name when the code location holds several strata projects (or one "
        "on several warehouses): resource keys, jobs, sensors and schedules become `strata_<name>...`.",
    )
    translation: (
        Annotated[
            TranslationFn[StrataAssetProps],
            TranslationFnResolver[StrataAssetProps](lambda props: {"node": props}),
        ]
        | None
    ) = Field(
        default=None,
        description="Asset attributes (key, key_prefix, group_name, tags, metadata, owners, kinds, ...) "
        "templated with `node` (the source or model: name, kind, module, ...) and `spec`.",
    )
    open_ended_partitions: bool = Field(
        default=False,
        description="Time partitions run on to the last complete day or month instead of the last one in the data.",
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
            name=self.name,
            translator=_translator(self.translation, self.open_ended_partitions),
            python_assets=_python_assets(self.python_models, here),
            select=self.select,
            stale_sensor_status=_sensor_status(self.stale_sensor),
            verification_schedule=self.verification_schedule,
            verification_schedule_status=_schedule_status(self.verification_schedule_status),
            gc=None if self.gc is None else _gc_policy(self.gc),
            gc_schedule_status=_schedule_status(self.gc.status if self.gc else "stopped"),
        )


def _translator(
    translation: TranslationFn[StrataAssetProps] | None, is_open_ended: bool
) -> StrataDagsterTranslator:
    if translation is None:
        return StrataDagsterTranslator(is_open_ended_partitions=is_open_ended)
    return TemplatedTranslator(translation, is_open_ended_partitions=is_open_ended)


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
