"""Where each source and model is read from in compiled SQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

from sqlglot import exp

from strata_dagster.language.definition import Project, Source
from strata_dagster.names import DEFAULT_BRANCH

# Compiled statements name relations by role, `__rel__.<name>`; binding swaps in real tables.
ROLE_SCHEMA = "__rel__"
VIEW_PREFIX = "v_"
ATTACHED_PREFIX = "src_"
_FILE_READERS = {".parquet": "read_parquet", ".csv": "read_csv_auto", ".json": "read_json_auto"}
_DEFAULT_FORMAT = ".parquet"


def view_name(model: str) -> str:
    return f"{VIEW_PREFIX}{model}"


def branch_schema(branch: str) -> str:
    """The schema that holds a branch's live views: `main` for the default branch."""
    return branch


def model_view(model: str, branch: str = DEFAULT_BRANCH) -> exp.Table:
    return exp.Table(this=exp.to_identifier(view_name(model)), db=exp.to_identifier(branch_schema(branch)))


def attached_catalog(source: Source) -> str:
    return f"{ATTACHED_PREFIX}{source.name}"


def role_relation(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name), db=exp.to_identifier(ROLE_SCHEMA))


def bind(
    statement: exp.Expr, relation: Callable[[str], exp.Table | exp.Query], *, copy: bool = True
) -> exp.Expr:
    """A copy of `statement` (`copy=False`: the statement itself, when the caller owns it) with
    every role relation replaced by what `relation` gives: a table, or a query (read as a
    subquery, so the statement stays self-contained)."""

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Table) and node.db == ROLE_SCHEMA:
            target = relation(node.name).copy()
            alias = node.args.get("alias")
            if isinstance(target, exp.Query):
                return target.subquery(alias.copy() if alias is not None else node.name)
            if alias is not None:
                target.set("alias", alias.copy())
            return target
        return node

    return (statement.copy() if copy else statement).transform(replace, copy=False)


def source_relation(source: Source, project_root: str | None = None) -> exp.Table:
    """A source's table (in the warehouse or an attached database) or its files."""
    if source.path is not None:
        path = source.path
        if project_root is not None and not PurePosixPath(path).is_absolute():
            path = str(PurePosixPath(project_root) / path)
        reader = _FILE_READERS[f".{file_format(source.path)}"]
        arguments: list[exp.Expr] = [exp.Literal.string(path)]
        if source.is_business_versioned and reader == "read_parquet":
            # Its partitions are `col=value/` folders: a file outside them is an error, never a
            # silent loss of the partition column.
            arguments.append(exp.EQ(this=exp.column("hive_partitioning"), expression=exp.true()))
        return exp.Table(this=exp.func(reader, *arguments))
    parts = source.table_name.split(".")
    table = exp.Table(this=exp.to_identifier(parts[-1]))
    if len(parts) >= 2:
        table.set("db", exp.to_identifier(parts[-2]))
    if len(parts) == 3:
        table.set("catalog", exp.to_identifier(parts[0]))
    if source.database is not None:
        table.set("catalog", exp.to_identifier(attached_catalog(source)))
    return table


def source_database_path(source: Source, project_root: Path) -> Path | None:
    """The DuckDB database file a `database:` source reads (relative paths start at the project
    folder); None for any other source."""
    if source.database is None:
        return None
    path = Path(source.database)
    return path if path.is_absolute() else project_root / path


def file_format(path: str) -> str:
    """`parquet`, `csv` or `json`: how DuckDB reads a source's files (parquet unless named otherwise)."""
    suffix = PurePosixPath(path.rstrip("*")).suffix.lower()
    return (suffix if suffix in _FILE_READERS else _DEFAULT_FORMAT).lstrip(".")


class DefaultRelations:
    """Sources as declared; models as their live views on a branch."""

    def __init__(self, project: Project, branch: str = DEFAULT_BRANCH) -> None:
        self.project = project
        self.branch = branch

    def __call__(self, name: str) -> exp.Table:
        if name in self.project.sources:
            return source_relation(self.project.sources[name], str(self.project.root))
        return model_view(name, self.branch)
