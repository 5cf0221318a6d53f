"""The serving copy's names and its one setting (serving.py), apart from its machinery: every
command checks the setting and reserves the names, and only a session that publishes writes the copy."""

from __future__ import annotations

from strata_dagster.backends.duckdb.connection import seconds_from_env
from strata_dagster.errors import E_GC

# Of a serving catalog's manifest (serving_catalog.py). Manifests of format 1 (no "format" key)
# list files only, those of format 2 describe catalogs naming files by absolute path: the catalog
# after either is written whole.
CATALOG_FORMAT = 3
READER_CATALOG = "strata_live"  # the name readers attach the serving catalog under
STATE_SCHEMA = "strata_serving"
GRACE_ENV = "STRATA_SERVING_GRACE"
DEFAULT_GRACE = 3600.0  # seconds a retired catalog stays readable before gc removes it


def grace_seconds() -> float:
    return seconds_from_env(GRACE_ENV, DEFAULT_GRACE, E_GC, example=3600)
