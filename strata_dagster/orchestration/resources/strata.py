"""`StrataResource`: where the project and its warehouse are, and which branch Dagster builds."""

import os
from pathlib import Path

import dagster as dg
from pydantic import Field, field_validator, model_validator

from strata_dagster.backends.choice import BackendChoice, backend_choice, choose_backend, current_backend
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.context import check_branch
from strata_dagster.errors import StrataError
from strata_dagster.language.loader import has_modules
from strata_dagster.paths import path_problem

DEFAULT_WAREHOUSE_NAME = "warehouse.duckdb"
WAREHOUSE_ENV = "STRATA_WAREHOUSE"


def default_warehouse(project_dir: Path | str) -> Path:
    """`$STRATA_WAREHOUSE`, else `warehouse.duckdb` in the project folder (`spark-warehouse/` on
    Spark), as the `strata` command."""
    from_env = os.environ.get(WAREHOUSE_ENV)
    return Path(from_env) if from_env else Path(project_dir) / current_backend().default_warehouse_name


class StrataResource(dg.ConfigurableResource):
    """A strata project and the DuckDB warehouse its models are built in.

    Every strata asset, observation and IO manager reads these three settings, so Dagster and the
    `strata` command line see the same project, warehouse and branch.
    """

    project_dir: str = Field(
        description=(
            "Folder holding the project's `*.strata` modules (e.g. `examples/shop`). Relative paths "
            "start at the directory Dagster runs in."
        )
    )
    warehouse: str = Field(
        description=(
            "DuckDB file the sources are read from and the snapshots, views and history are written "
            "to (e.g. `examples/shop/warehouse.duckdb`). One writer at a time: strata assets share "
            "the `duckdb` pool."
        )
    )
    backend: str = Field(
        default="duckdb",
        description=(
            "The backend the models build on: `duckdb` (embedded, the default) or `spark`, where "
            "`warehouse` is the Spark warehouse directory with its catalog (or the catalog of "
            "`spark_remote`)."
        ),
    )
    engine: str | None = Field(
        default=None,
        description="The former name of `backend`, still read when `backend` is left at its default.",
    )
    spark_remote: str | None = Field(
        default=None,
        description=(
            "With backend `spark`: a Spark Connect server (`sc://host:port`) whose catalog every run "
            "worker shares, instead of a local Spark per process."
        ),
    )
    branch: str = Field(
        default=DEFAULT_BRANCH,
        description=(
            "Branch whose live views (`<branch>.v_<model>`) Dagster builds and reads; `main` is the "
            "default. Create others with `strata branch create PROJECT NAME`."
        ),
    )

    @field_validator("project_dir")
    @classmethod
    def _project_dir_holds_modules(cls, value: str) -> str:
        folder = Path(value)
        if path_problem(folder) is not None or not folder.is_dir():
            raise ValueError(
                f"project_dir `{value}` is not a folder: set StrataResource(project_dir=...) to the "
                "folder that holds the project's *.strata modules, e.g. examples/shop"
            )
        if not has_modules(folder):  # bounded: a folder as large as `/` is no project
            raise ValueError(
                f"project_dir `{value}` holds no *.strata module: point it at the project folder "
                "(the one `strata check` accepts)"
            )
        return value

    @field_validator("warehouse")
    @classmethod
    def _warehouse_is_a_file(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "warehouse is empty: set it to a DuckDB file, e.g. examples/shop/warehouse.duckdb"
            )
        return value

    @model_validator(mode="after")
    def _warehouse_fits_the_backend(self) -> "StrataResource":
        try:
            choice = self.backend_choice
        except StrataError as error:
            raise ValueError(f"{error.message}: {error.hint}") from None
        if choice.is_duckdb and Path(self.warehouse).is_dir():
            raise ValueError(
                f"warehouse `{self.warehouse}` is a folder: set it to a DuckDB file inside it, e.g. "
                f"{Path(self.warehouse) / DEFAULT_WAREHOUSE_NAME} (or backend='spark' for a Spark warehouse)"
            )
        return self

    @property
    def backend_choice(self) -> BackendChoice:
        name = self.engine if self.engine is not None and self.backend == "duckdb" else self.backend
        return backend_choice(name, self.spark_remote)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Every engine call of a run worker goes to the backend the resource names.
        choose_backend(self.backend_choice)

    @field_validator("branch")
    @classmethod
    def _branch_is_a_name(cls, value: str) -> str:
        try:
            return check_branch(value)
        except StrataError as error:
            raise ValueError(f"{error.message}: {error.hint}") from None

    @property
    def project_path(self) -> Path:
        return Path(self.project_dir)

    @property
    def warehouse_path(self) -> Path:
        return Path(self.warehouse)
