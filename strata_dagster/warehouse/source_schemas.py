"""Read the columns of a project's sources from the warehouse, read-only.

A source is a table in the warehouse (`table: raw.orders`), a table in another DuckDB file
(`database: 'ingest.duckdb'`, attached read-only) or files (`path: 'data/*.parquet'`). Sources that
cannot be found (no such table, file or database) are left out of the answer: deciding whether
that is an error is the caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

import duckdb
from sqlglot import exp

if TYPE_CHECKING:
    from strata_dagster.language.definition import Source

DIALECT: Final = "duckdb"
# Attached source databases are named with this prefix and a counter, never after user input.
_ATTACH_PREFIX: Final = "strata_source_"
# File readers by extension (lowercased); `.gz` and friends are read by the same reader.
_FILE_READERS: Final = (
    (".parquet", "read_parquet"),
    (".csv", "read_csv_auto"),
    (".tsv", "read_csv_auto"),
    (".json", "read_json_auto"),
    (".jsonl", "read_json_auto"),
    (".ndjson", "read_json_auto"),
)
_COMPRESSED: Final = (".gz", ".zst")
# What "the source is not there" looks like: a missing table or schema, a missing file or
# database. Anything else (a broken view, a corrupt file) is a real error and propagates.
_MISSING: Final = (duckdb.CatalogException, duckdb.IOException)

SourceSchema = tuple[tuple[str, str], ...]


def read_source_schemas(
    warehouse: Path,
    sources: Mapping[str, Source],
    project_root: Path | None = None,
) -> dict[str, SourceSchema]:
    """(column, DuckDB type) per source that exists, in the sources' order.

    File paths and `database` files are relative to `project_root` (default: the current
    directory). A warehouse file that does not exist gives `{}` and is not created.
    """
    if not warehouse.is_file():
        return {}
    root = project_root if project_root is not None else Path.cwd()
    connection = duckdb.connect(str(warehouse), read_only=True)
    try:
        attached: dict[Path, str | None] = {}
        schemas: dict[str, SourceSchema] = {}
        for name, source in sources.items():
            relation = _relation(connection, source, root, attached)
            if relation is None:
                continue
            schema = _describe(connection, relation)
            if schema is not None:
                schemas[name] = schema
        return schemas
    finally:
        connection.close()


def file_reader(path: str) -> str | None:
    """The DuckDB table function that reads `path`, chosen by its extension."""
    lowered = path.lower()
    for suffix in _COMPRESSED:
        lowered = lowered.removesuffix(suffix)
    for extension, reader in _FILE_READERS:
        if lowered.endswith(extension):
            return reader
    return None


def _relation(
    connection: duckdb.DuckDBPyConnection,
    source: Source,
    root: Path,
    attached: dict[Path, str | None],
) -> exp.Expression | None:
    """What to DESCRIBE for `source`: a table or a `SELECT * FROM read_...(path)`; None if absent."""
    if source.path is not None:
        reader = file_reader(source.path)
        if reader is None:
            return None
        files = exp.Literal.string(str(root / source.path))
        return exp.select(exp.Star()).from_(exp.Table(this=exp.Anonymous(this=reader, expressions=[files])))
    table = exp.to_table(source.table_name, dialect=DIALECT)
    if source.database is None:
        return table
    catalog = _attach(connection, root / source.database, attached)
    if catalog is None:
        return None
    return exp.table_(
        table.args["this"].copy(),
        db=table.args["db"].copy() if table.args.get("db") else exp.to_identifier("main"),
        catalog=exp.to_identifier(catalog),
    )


def _attach(
    connection: duckdb.DuckDBPyConnection, database: Path, attached: dict[Path, str | None]
) -> str | None:
    """Attach `database` read-only once per call; None when it does not exist."""
    if database in attached:
        return attached[database]
    alias: str | None = None
    if database.is_file():
        alias = f"{_ATTACH_PREFIX}{len(attached)}"
        statement = exp.Attach(
            this=exp.alias_(exp.Literal.string(str(database)), exp.to_identifier(alias)),
            exists=False,
            expressions=[exp.AttachOption(this=exp.var("READ_ONLY"))],
        )
        try:
            connection.execute(statement.sql(dialect=DIALECT))
        except _MISSING:
            alias = None
    attached[database] = alias
    return alias


def _describe(connection: duckdb.DuckDBPyConnection, relation: exp.Expression) -> SourceSchema | None:
    statement = exp.Describe(this=relation)
    try:
        rows = connection.execute(statement.sql(dialect=DIALECT)).fetchall()
    except _MISSING:
        return None
    return tuple((str(row[0]), str(row[1])) for row in rows)
