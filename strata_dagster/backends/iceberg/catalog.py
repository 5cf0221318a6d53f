"""Which Iceberg catalog a warehouse publishes to (`STRATA_ICEBERG_CATALOG`), opened with pyiceberg."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from strata_dagster.errors import E_ICEBERG, StrataError

CATALOG_ENV = "STRATA_ICEBERG_CATALOG"
# The catalog name pyiceberg's SQL catalog files tables under: readers load it by this name.
CATALOG_NAME = "strata"
LOCATION_ENV = "STRATA_ICEBERG_WAREHOUSE"
EMBEDDED = "sqlite"
OFF = ("", "off", "none")
_FOLDER_SUFFIX = ".iceberg"


@dataclass(frozen=True)
class CatalogSetting:
    """A catalog: pyiceberg's SQL catalog (SQLite or PostgreSQL URI) or a REST catalog's URI."""

    kind: str  # sql or rest
    uri: str
    location: str  # where pyiceberg writes the data files it writes itself, and table metadata

    def describe(self) -> str:
        return f"{self.kind} catalog {self.uri}"


def folder_of(warehouse: Path) -> Path:
    """The embedded catalog's folder: `<warehouse>.iceberg/` beside the warehouse file."""
    return warehouse.with_name(warehouse.name + _FOLDER_SUFFIX)


def is_enabled() -> bool:
    """Whether `STRATA_ICEBERG_CATALOG` names a catalog (whatever the warehouse)."""
    return os.environ.get(CATALOG_ENV, "").strip().lower() not in OFF


def setting_for(warehouse: Path, raw: str | None = None) -> CatalogSetting | None:
    """The catalog `raw` (else `STRATA_ICEBERG_CATALOG`) names for `warehouse`; None: publication off."""
    value = (os.environ.get(CATALOG_ENV, "") if raw is None else raw).strip()
    if value.lower() in OFF:
        return None
    folder = folder_of(warehouse.resolve())
    location = os.environ.get(LOCATION_ENV) or folder.as_uri()
    if value.lower() == EMBEDDED:
        return CatalogSetting("sql", f"sqlite:///{folder / 'catalog.db'}", location)
    if value.startswith(("sqlite:", "postgresql:", "postgresql+")):
        return CatalogSetting("sql", value, location)
    if value.startswith(("http://", "https://")):
        return CatalogSetting("rest", value, location)
    raise StrataError(
        E_ICEBERG,
        f"{CATALOG_ENV}={value!r} names no Iceberg catalog",
        hint=f"use {CATALOG_ENV}=sqlite (a SQLite catalog beside the warehouse), a "
        "postgresql://user:pass@host/db URI, a REST catalog's http(s):// URI, or off",
    )
