"""The strata language: parse modules, load projects (no duckdb, no dagster here)."""

from strata_dagster.language.definition import Model, Project, Source
from strata_dagster.language.loader import load_project, load_text
from strata_dagster.language.parser import parse_module

__all__ = ["Model", "Project", "Source", "load_project", "load_text", "parse_module"]
