"""The names a project's definitions take in a code location: resource keys, jobs, ops, sensors,
schedules. Unscoped (`strata`, `strata_materialize_stale`, ...) by default; a project given a
`name` (`shop`) takes `strata_shop`, `strata_shop_materialize_stale`, ... so that two projects, or
one project on two warehouses, share a code location."""

from __future__ import annotations

import re
from dataclasses import dataclass

from strata_dagster.errors import E_COMPONENT, StrataError

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
PREFIX = "strata_"


@dataclass(frozen=True)
class ProjectNames:
    """Every name of one project's definitions; `scope` None: the unscoped names."""

    scope: str | None = None

    def __post_init__(self) -> None:
        if self.scope is not None and not _NAME.match(self.scope):
            raise StrataError(
                E_COMPONENT,
                f"name `{self.scope}` cannot scope Dagster names",
                hint="give letters, digits and underscores, starting with a letter, e.g. `shop`",
            )

    def scoped(self, name: str) -> str:
        """`strata_<rest>` as this project's: `strata_<scope>_<rest>`."""
        assert name.startswith(PREFIX), name
        if self.scope is None:
            return name
        return f"{PREFIX}{self.scope}_{name.removeprefix(PREFIX)}"

    # -- resources ------------------------------------------------------------------------------
    @property
    def resource_key(self) -> str:
        return "strata" if self.scope is None else f"strata_{self.scope}"

    @property
    def io_manager_key(self) -> str:
        return self.scoped("strata_io_manager")

    @property
    def duckdb_resource_key(self) -> str:
        return self.scoped("strata_duckdb")

    # -- jobs -----------------------------------------------------------------------------------
    @property
    def unpartitioned_job(self) -> str:
        return self.scoped("strata_unpartitioned")

    def partitions_job(self, first_asset: str) -> str:
        return self.scoped(f"strata_{first_asset}_partitions")

    @property
    def observe_job(self) -> str:
        return self.scoped("strata_observe_sources")

    @property
    def backfill_job(self) -> str:
        return self.scoped("strata_backfill")

    def backfill_partitions_job(self, first_asset: str) -> str:
        return f"{self.backfill_job}_{first_asset}_partitions"

    def is_backfill_job(self, job_name: str) -> bool:
        """A `strata_backfill` job of this project (every run of one is a backfill)."""
        return job_name == self.backfill_job or job_name.startswith(f"{self.backfill_job}_")

    @property
    def materialize_all_job(self) -> str:
        return self.scoped("strata_materialize_all")

    @property
    def backfill_range_job(self) -> str:
        return f"{self.backfill_job}_range"

    @property
    def verify_job(self) -> str:
        return self.scoped("strata_verify")

    @property
    def gc_job(self) -> str:
        return self.scoped("strata_gc")

    # -- ops ------------------------------------------------------------------------------------
    def models_op(self, partitioning: str) -> str:
        """The op building the SQL models of one partitioning (`unpartitioned`, `daily_revenue`)."""
        return self.scoped(f"strata_{partitioning}_models")

    @property
    def checks_op(self) -> str:
        return self.scoped("strata_checks")

    @property
    def assumptions_op(self) -> str:
        return self.scoped("strata_partition_assumptions")

    @property
    def ledgers_op(self) -> str:
        return self.scoped("strata_source_ledgers")

    @property
    def gc_op(self) -> str:
        return self.scoped("strata_gc_collect")

    @property
    def materialize_all_op(self) -> str:
        return "materialize_all" if self.scope is None else self.scoped("strata_materialize_all_waves")

    @property
    def backfill_range_op(self) -> str:
        """Its run config: `ops: {<this name>: {config: {assets, first, last}}}`."""
        return "backfill_range" if self.scope is None else self.scoped("strata_backfill_range_waves")

    # -- sensors and schedules ------------------------------------------------------------------
    @property
    def stale_sensor(self) -> str:
        return self.scoped("strata_materialize_stale")

    @property
    def automation_sensor(self) -> str:
        return self.scoped("strata_automation")

    @property
    def verify_schedule(self) -> str:
        return self.scoped("strata_verify_schedule")

    @property
    def gc_schedule(self) -> str:
        return self.scoped("strata_gc_schedule")


UNSCOPED = ProjectNames()
