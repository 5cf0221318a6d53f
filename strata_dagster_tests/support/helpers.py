"""Small builders shared by tests."""

from pathlib import Path

from strata_dagster.compile import compile_project
from strata_dagster.language.loader import link_project
from strata_dagster.language.parser import parse_module
from strata_dagster_tests.conftest import CUSTOMERS_COLUMNS, ORDERS_COLUMNS, SOURCES_MODULE

SCHEMAS = {"orders": ORDERS_COLUMNS, "customers": CUSTOMERS_COLUMNS}


def project_of(text: str, name: str = "m.strata", *, with_sources: bool = True):
    modules = [parse_module(SOURCES_MODULE, "sources.strata")] if with_sources else []
    modules.append(parse_module(text, name))
    return link_project(Path("."), modules)


def compile_text(text: str, *, schemas=SCHEMAS, with_sources: bool = True):
    return compile_project(project_of(text, with_sources=with_sources), schemas)
