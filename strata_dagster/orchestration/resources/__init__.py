"""Resources: `StrataResource` (where a project and its warehouse are) and `StrataDuckDBResource`
(dagster-duckdb's resource reading the live views through the serving copy)."""

from strata_dagster.orchestration.resources.duckdb import StrataDuckDBResource
from strata_dagster.orchestration.resources.strata import StrataResource, default_warehouse

__all__ = ["StrataDuckDBResource", "StrataResource", "default_warehouse"]
