"""What every engine operation starts from: the project, compiled against the warehouse's sources."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strata_dagster.compile import CompiledProject, compile_project
from strata_dagster.compile.engine_check import for_engine
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.listing_prefetch import Listings
from strata_dagster.errors import E_BRANCH, StrataError
from strata_dagster.language import Project, load_project
from strata_dagster.language.selection import select
from strata_dagster.warehouse.migrations import HISTORY_SCHEMA, SNAPSHOT_SCHEMA
from strata_dagster.warehouse.session import Session

_BRANCH_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_RESERVED_SCHEMAS = {HISTORY_SCHEMA, SNAPSHOT_SCHEMA, "information_schema", "pg_catalog", "temp", "system"}


def check_branch(branch: str) -> str:
    if not _BRANCH_NAME.fullmatch(branch) or branch.lower() in _RESERVED_SCHEMAS:
        raise StrataError(
            E_BRANCH,
            f"`{branch}` cannot be a branch name",
            hint="use letters, digits and underscores, not starting with a digit, and not "
            + ", ".join(sorted(_RESERVED_SCHEMAS)),
        )
    return branch


def check_branch_in(session: Session, branch: str) -> str:
    """`check_branch`, and the clashes only the open warehouse knows of: DuckDB resolves names
    case-insensitively, and `x.v_model` is ambiguous when the warehouse file is `x.duckdb`."""
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


def load_context(
    session: Session,
    project_dir: Path,
    overrides: Mapping[str, str],
    branch: str = DEFAULT_BRANCH,
    *,
    project: Project | None = None,
    listings: Listings | None = None,
) -> ProjectContext:
    """The project (`project`: the one loaded from `project_dir` already) compiled against the
    session's sources; `listings` were started for it before the session opened."""
    project = project or load_project(project_dir)
    check_branch_in(session, branch)
    schemas = session.prepare_sources(project, overrides)
    return compiled_context(project, schemas, session.engine, overrides, branch, listings)


def compiled_context(
    project: Project,
    schemas: Mapping[str, tuple[tuple[str, str], ...]],
    engine: str,
    overrides: Mapping[str, str] | None = None,
    branch: str = DEFAULT_BRANCH,
    listings: Listings | None = None,
) -> ProjectContext:
    """The project compiled against `schemas` (the readable sources' columns) for `engine`."""
    compiled = compile_project(project, schemas)
    if engine != "duckdb":  # every statement as that engine computes DuckDB's rows
        compiled = for_engine(compiled, engine, schemas)
    return ProjectContext(project, compiled, dict(overrides or {}), branch, schemas, listings or Listings())


def select_models(project: Project, selection: Iterable[str] | None) -> tuple[str, ...]:
    """The models `selection` names, in dependency order (all when it is empty): names, globs,
    `tag:name`, `+` for upstream / downstream, comma-separated (see language.selection). E025
    for a selector that is malformed or matches no model."""
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
