"""Whether a writing command may create its warehouse. A `strata run` on a path that does not exist
yet makes a new warehouse there, which is how a project whose sources are files starts. A source
table read from the warehouse itself cannot be in a warehouse that does not exist, so such a run
could only fail on it (E012) after leaving an empty, migrated warehouse file behind: the path is a
typo, or the tables were loaded elsewhere. It is refused before anything is created."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from strata_dagster.engine.context import select_models, with_upstream
from strata_dagster.errors import E_WAREHOUSE, StrataError
from strata_dagster.language.definition import Project, Source
from strata_dagster.warehouse.engines import current_engine
from strata_dagster.warehouse.sources import source_table
from strata_dagster.warehouse.sql import render


def refuse_new_warehouse_without_sources(
    project: Project, warehouse: Path, models: Iterable[str], overrides: Mapping[str, str]
) -> None:
    """E020 when `warehouse` does not exist and the models `models` select (with everything they
    read) read a source table from it; nothing is created."""
    if warehouse.exists() or not current_engine().is_duckdb:
        return
    source = _first_source_in_warehouse(project, models, overrides)
    if source is None:
        return
    raise StrataError(
        E_WAREHOUSE,
        f"warehouse `{warehouse}` does not exist, and source `{source.name}` reads "
        f"`{render(source_table(source, project, overrides))}` from it: nothing was created",
        source.location,
        hint="check --warehouse (or STRATA_WAREHOUSE); a new warehouse needs its source tables loaded "
        "first (e.g. `strata sample-data PROJECT` for the example)",
    )


def _first_source_in_warehouse(
    project: Project, models: Iterable[str], overrides: Mapping[str, str]
) -> Source | None:
    """The first source the selection reads from a table of the warehouse itself (not a file, not
    another `database:`, not overridden), in build order."""
    for name in with_upstream(project, select_models(project, models)):
        for relation in project.models[name].references:
            source = project.sources.get(relation)
            if source is None or relation in overrides:
                continue
            if source.path is None and source.database is None:
                return source
    return None
