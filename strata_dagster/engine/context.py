"""What every engine operation starts from: the project, compiled against the warehouse's sources."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strata_dagster.backends.base import Session
from strata_dagster.backends.duckdb.serving_names import READER_CATALOG, STATE_SCHEMA
from strata_dagster.compile import CompiledProject
from strata_dagster.compile.compile_cache import compiled_project
from strata_dagster.compile.relations import DEFAULT_BRANCH, ROLE_SCHEMA, source_relation
from strata_dagster.engine.listing_prefetch import Listings
from strata_dagster.errors import E_BRANCH, StrataError
from strata_dagster.language import Project, load_project
from strata_dagster.language.parse_cache import cache_dir_of
from strata_dagster.sql.render import SNAPSHOT_SCHEMA
from strata_dagster.state.migrations import HISTORY_SCHEMA

_BRANCH_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# A branch is a schema of views (`<branch>.v_<model>`) in the warehouse and in the serving catalog
# readers attach: it may not take the name of a schema or catalog either of them, or a reader's
# DuckDB or Spark, already gives a meaning. DuckDB (and Spark) compare these names ignoring case.
_RESERVED_NAMES = {
    HISTORY_SCHEMA: "the warehouse's history schema",
    SNAPSHOT_SCHEMA: "the warehouse's snapshot schema",
    STATE_SCHEMA: "the serving catalog's own schema",
    READER_CATALOG: "the catalog readers attach the live views under (`strata connect`)",
    ROLE_SCHEMA: "the schema strata's compiled statements name their inputs by",
    "information_schema": "DuckDB's catalog schema",
    "pg_catalog": "DuckDB's catalog schema",
    "memory": "the catalog of a reader's fresh DuckDB connection",
    "system": "DuckDB's built-in catalog",
    "temp": "DuckDB's catalog of temporary objects",
    "spark_catalog": "Spark's session catalog",
    "global_temp": "Spark's database of global temporary views",
}


def check_branch(branch: str, *, reserved: bool = True) -> str:
    """`branch` if it can name a branch: an identifier that no reader would confuse with another
    schema or catalog (`reserved=False` checks the spelling only: deleting a branch made before a
    name was reserved)."""
    if not _BRANCH_NAME.fullmatch(branch):
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name",
            hint="use letters, digits and underscores (at most 63), not starting with a digit",
        )
    if not reserved:
        return branch
    meaning = _RESERVED_NAMES.get(branch.lower())
    if meaning is not None:
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name: `{branch.lower()}` is {meaning}",
            hint="pick another branch name; reserved (in any case): " + ", ".join(sorted(_RESERVED_NAMES)),
        )
    if branch.lower() == DEFAULT_BRANCH and branch != DEFAULT_BRANCH:
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name: it differs from the default branch `{DEFAULT_BRANCH}` "
            "only in case, and DuckDB would give both one schema",
            hint=f"use `{DEFAULT_BRANCH}`, or a name that differs in more than case",
        )
    return branch


def project_schema_names(project: Project) -> dict[str, str]:
    """The schema and catalog names the project's table sources read (lower case), each with the
    source that reads it: a branch of that name would put its views among the source's tables. A
    source in an attached database reads its schema through the database's own name, so only that
    name can clash (the peer of `src.main.orders` is not the warehouse's `main`)."""
    names: dict[str, str] = {}
    for source in project.sources.values():
        if source.path is not None:
            continue
        relation = source_relation(source)
        parts = ("catalog",) if source.database is not None else ("db", "catalog")
        for part in (relation.args.get(name) for name in parts):
            if part is not None:
                names.setdefault(part.name.lower(), source.name)
    return names


def check_branch_of(project: Project, branch: str) -> str:
    """`check_branch`, and a branch named like a schema or catalog the project's sources read."""
    check_branch(branch)
    source = project_schema_names(project).get(branch.lower())
    if source is not None:
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name: source `{source}` reads a table of schema or catalog "
            f"`{branch.lower()}`, and the branch's views would go among its tables",
            hint="pick another branch name",
        )
    return branch


def check_branch_in(session: Session, branch: str, project: Project | None = None) -> str:
    """`check_branch`, and the clashes only the open warehouse (and `project`) knows of: DuckDB
    resolves names case-insensitively, and `x.v_model` is ambiguous when the warehouse file is
    `x.duckdb`, or when `x` is a schema of tables (a source's, a correction's)."""
    check_branch(branch)
    database = session.database_name()
    if branch.lower() == database.lower():
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name: it is the name of the warehouse file's database",
            hint=f"pick another branch name (DuckDB could not tell schema `{branch}` from database `{database}`)",
        )
    clashing = session.history.branches_differing_in_case(branch) if session.has_history() else []
    for other in clashing:
        if other != branch and other.lower() == branch.lower():
            raise StrataError(
                E_BRANCH,
                f"branch `{branch}` differs from branch `{other}` only in case, and DuckDB would give both one schema",
                hint=f"use `{other}`, or a name that differs in more than case",
            )
    if project is not None:
        check_branch_of(project, branch)
    if branch != DEFAULT_BRANCH and session.schema_has_tables(branch):
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name: schema `{branch}` holds tables, and a branch's "
            "schema holds only its views (DuckDB ignores the case of schema names)",
            hint="pick another branch name",
        )
    return branch


@dataclass(frozen=True)
class ProjectContext:
    project: Project
    compiled: CompiledProject
    overrides: dict[str, str]
    branch: str = DEFAULT_BRANCH
    # (column, type) of every source readable when the project was compiled (overrides applied)
    source_schemas: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # Business-versioned file sources' listings started before the warehouse opened
    listings: Listings = field(default_factory=Listings, compare=False, repr=False)


def parse_cache_dir(warehouse: Path) -> Path | None:
    """Where the parsed modules of projects run against `warehouse` are kept (language.parse_cache):
    beside a warehouse file; None for a backend without one."""
    from strata_dagster.backends.choice import current_backend

    return cache_dir_of(warehouse) if current_backend().capabilities.has_warehouse_file else None


def load_context(
    session: Session,
    project_dir: Path,
    overrides: Mapping[str, str],
    branch: str = DEFAULT_BRANCH,
    *,
    project: Project | None = None,
    listings: Listings | None = None,
    cache_dir: Path | None = None,
) -> ProjectContext:
    """The project (`project`: the one loaded from `project_dir` already) compiled against the
    session's sources; `listings` were started for it before the session opened; the compile is
    kept in `cache_dir` (compile.compile_cache; None: not kept)."""
    project = project or load_project(project_dir)
    check_branch_in(session, branch, project)
    schemas = session.prepare_sources(project, overrides)
    return compiled_context(project, schemas, session.backend, overrides, branch, listings, cache_dir)


def compiled_context(
    project: Project,
    schemas: Mapping[str, tuple[tuple[str, str], ...]],
    engine: str,
    overrides: Mapping[str, str] | None = None,
    branch: str = DEFAULT_BRANCH,
    listings: Listings | None = None,
    cache_dir: Path | None = None,
) -> ProjectContext:
    """The project compiled against `schemas` (the readable sources' columns) for `engine`."""
    compiled = compiled_project(project, schemas, cache_dir)
    if engine != "duckdb":  # every statement as that engine computes DuckDB's rows
        from strata_dagster.backends.dialect_check import for_engine  # the rewrites, only for it

        compiled = for_engine(compiled, engine, schemas)
    return ProjectContext(project, compiled, dict(overrides or {}), branch, schemas, listings or Listings())


def select_models(project: Project, selection: Iterable[str] | None) -> tuple[str, ...]:
    """The models `selection` names, in dependency order (all when it is empty): names, globs,
    `tag:name`, `+` for upstream / downstream, comma-separated (see language.selection). E025
    for a selector that is malformed or matches no model."""
    if not selection:
        return project.order  # every model: a run of them all reads no selector
    from strata_dagster.language.selection import select

    return select(project, selection)


def with_upstream(project: Project, names: Iterable[str]) -> tuple[str, ...]:
    """`names` and every model they read, transitively, in dependency order."""
    needed: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        stack.extend(project.upstream_models(name))
    return tuple(name for name in project.order if name in needed)
