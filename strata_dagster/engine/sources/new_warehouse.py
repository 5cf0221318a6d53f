"""Whether a writing command may create its warehouse. A `strata run` on a path that does not exist
yet makes a new warehouse there, which is how a project whose sources are files starts. A source
table read from the warehouse itself cannot be in a warehouse that does not exist, so such a run
could only fail on it (E012) after leaving an empty, migrated warehouse file behind: the path is a
typo, or the tables were loaded elsewhere. It is refused before anything is created (E020). So is
a run whose file sources (or tables of another DuckDB database) cannot be read: a mistyped `path:`
failed the same way (E012), after the new warehouse was made."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from strata_dagster.backends.choice import current_backend
from strata_dagster.backends.duckdb.sources import source_table, unreadable_without_warehouse
from strata_dagster.engine.context import select_models, with_upstream
from strata_dagster.engine.sources.readings import unreadable_source
from strata_dagster.errors import E_WAREHOUSE, StrataError
from strata_dagster.language.definition import Project, Source
from strata_dagster.sql.render import render


def refuse_new_warehouse_without_sources(
    project: Project, warehouse: Path, models: Iterable[str], overrides: Mapping[str, str]
) -> None:
    """E020 when `warehouse` does not exist and the models `models` select (with everything they
    read) read a source table from it; E012 when a file source (or a table of another DuckDB
    database) they read cannot be read. Nothing is created."""
    if warehouse.exists() or not current_backend().capabilities.has_warehouse_file:
        return
    source = _first_source_in_warehouse(project, models, overrides)
    if source is None:
        _refuse_unreadable_sources(project, warehouse, models, overrides)
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
    for name in _sources_read(project, models):
        source = project.sources[name]
        if name not in overrides and source.path is None and source.database is None:
            return source
    return None


def _refuse_unreadable_sources(
    project: Project, warehouse: Path, models: Iterable[str], overrides: Mapping[str, str]
) -> None:
    """E012 for the first source the selection reads that cannot be read now, before the new
    warehouse is created."""
    names = [name for name in _sources_read(project, models) if name not in overrides]
    unreadable = unreadable_without_warehouse(project, names)
    for name in names:
        if name in unreadable:
            source = project.sources[name]
            error = unreadable_source(source, source_table(source, project, overrides), unreadable[name])
            raise StrataError(
                error.code,
                f"{error.message}; warehouse `{warehouse}` does not exist and nothing was created",
                error.location,
                hint=error.hint,
            )


def _sources_read(project: Project, models: Iterable[str]) -> list[str]:
    """The sources the selection (with everything it reads) reads, in build order, once each."""
    found: dict[str, None] = {}
    for name in with_upstream(project, select_models(project, models)):
        for relation in project.models[name].references:
            if relation in project.sources:
                found[relation] = None
    return list(found)
