"""The catalog behind a project's definitions: read from the warehouse where the code location
loads, and handed to each run's worker as Dagster's reconstruction metadata.

Why: Dagster loads a code location's definitions once in its code server, then again in the
process of every run, from the same code. Reading the catalog opens the warehouse and describes
every source and model (partition bounds, columns, lineage): about 0.13 s of each run's start for
the example, three times in a first *Materialize all* (docs/dagster.md, "The Dagster path's cost").
Dagster's answer for definitions that depend on outside state is reconstruction metadata
(`DefinitionsLoadContext`, as its state-backed integrations use): what the code server's load
read is stored with each run's execution plan, and the run's load finds it there.

A run's worker declares the project from the code server's reading only while the project's files
are those it was read with (engine.catalog_text); fingerprints, SQL and lineage are derived again
from them, so code versions are always this code's. Partitions, columns and warnings are then the
code location's, as the UI showed them when the run was launched (a reload reads them again).
"""

from __future__ import annotations

import hashlib

from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType

from strata_dagster.engine.catalog import Catalog, read_catalog
from strata_dagster.engine.catalog_text import catalog_from_text, reading_text
from strata_dagster.language import load_project
from strata_dagster.orchestration.resources import StrataResource
from strata_dagster.warehouse.engines import current_engine

KEY_PREFIX = "strata_dagster/catalog/"


def project_catalog(resource: StrataResource) -> Catalog:
    """The catalog of the resource's project on its warehouse and branch: the code location's
    reading when Dagster reconstructs the definitions for a run and the project's files are the
    same; otherwise read from the warehouse (and recorded for the runs)."""
    context = DefinitionsLoadContext.get()
    key = catalog_key(resource)
    catalog = None
    if context.load_type == DefinitionsLoadType.RECONSTRUCTION:
        text = context.reconstruction_metadata.get(key)
        if isinstance(text, str):
            project = load_project(resource.project_path)
            catalog = catalog_from_text(text, project, current_engine().name, resource.branch)
    if catalog is None:
        catalog = read_catalog(resource.project_path, resource.warehouse_path, resource.branch)
    text = reading_text(catalog)
    if text is not None:
        context.add_to_pending_reconstruction_metadata(key, text)
    return catalog


def catalog_key(resource: StrataResource) -> str:
    """One key per project, warehouse, branch and engine: a code location may declare several."""
    where = "\0".join(
        (
            str(resource.project_path.resolve()),
            str(resource.warehouse_path),
            resource.branch,
            current_engine().name,
        )
    )
    return KEY_PREFIX + hashlib.sha256(where.encode()).hexdigest()[:16]
