"""A warehouse moved or copied with its snapshot folder reads the files beside it.

A snapshot view names its file by absolute path, so that any DuckDB client opening the warehouse
file reads it. After `mv` of the project folder, those paths name nothing; after `cp -r`, the copy
reads the original's files, and its own `strata gc` would count every file of its own folder as
unreferenced. So the first session that opens a moved warehouse (a reading one too: it writes this
and nothing else, backends/duckdb/opening.py) points every snapshot view that reads a file of another
folder at the file of the same name in this warehouse's folder, when it is there: names are never
reused and files never change, so it holds the same rows. One transaction rewrites them all. The
serving copy needs none of this: it names files relative to the warehouse's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from strata_dagster.backends.duckdb.snapshot_files import file_of, views_over_files
from strata_dagster.backends.sql.runner import run
from strata_dagster.faults import checkpoint
from strata_dagster.sql.render import DIALECT, snapshot_table

if TYPE_CHECKING:
    from strata_dagster.backends.duckdb.session import DuckDBSession


def _moved_view(name: str, sql: str, folder: Path) -> exp.Create | None:
    """The view reading the file of the same name in `folder`, or None when it is not there."""
    path = file_of(sql)
    if path is None or Path(path).parent == folder:
        return None
    here = folder / Path(path).name
    if not here.is_file():
        return None
    parsed = sqlglot.parse_one(sql, read=DIALECT)
    query = parsed.expression if isinstance(parsed, exp.Create) else None
    if not isinstance(query, exp.Query):
        return None
    literals = [node for node in query.find_all(exp.Literal) if node.is_string and node.this == path]
    if not literals:
        return None
    for literal in literals:
        literal.replace(exp.Literal.string(str(here)))
    return exp.Create(this=snapshot_table(name), kind="VIEW", expression=query, replace=True)


def moved_views(views: dict[str, str], folder: Path) -> dict[str, exp.Create]:
    """Of `views` (snapshot view -> stored SQL), those that read a file of another folder whose
    namesake is in `folder`: each with the statement that points it there (nothing written)."""
    moved = {}
    here = str(folder)
    for name, sql in views.items():
        path = file_of(sql)
        if path is None or os.path.dirname(path) == here:  # a string compare: runs once per snapshot
            continue
        view = _moved_view(name, sql, folder)
        if view is not None:
            moved[name] = view
    return moved


RELOCATED_STEP = "relocated"  # a crash test's step (strata_dagster.faults): the views just rewritten


def apply(session: DuckDBSession, moved: dict[str, exp.Create]) -> None:
    """Rewrite the `moved` views, in one transaction."""
    if moved:
        with session.transaction():
            for view in moved.values():
                run(session.con, view, consume=True)
        checkpoint(RELOCATED_STEP)


def relocate(session: DuckDBSession, folder: Path) -> int:
    """Point the snapshot views that read files of another folder at this `folder`'s files of the
    same names; how many were rewritten (0, from one catalog query, when none moved)."""
    moved = moved_views(views_over_files(session.con), folder)
    apply(session, moved)
    return len(moved)
