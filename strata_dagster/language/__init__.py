"""The strata language: parse modules, load projects (no duckdb, no dagster here)."""

from typing import Any

from strata_dagster.language.definition import Model, Project, Source
from strata_dagster.language.loader import load_project, load_text

__all__ = ["Model", "Project", "Source", "load_project", "load_text", "parse_module"]


def __getattr__(name: str) -> Any:
    # The parser (and its grammar library) is imported when something parses, not on every load:
    # a project whose parsed modules are cached never needs it.
    if name == "parse_module":
        from strata_dagster.language.parser import parse_module

        return parse_module
    raise AttributeError(name)
