"""strata_dagster: strata models as Dagster assets on immutable, versioned DuckDB layers."""

from strata_dagster.errors import StrataError

__all__ = ["StrataError"]
