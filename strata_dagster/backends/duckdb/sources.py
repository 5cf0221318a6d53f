"""Reading sources inside an open warehouse: attached databases, overrides, schemas and fingerprints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.backends.sql.runner import Connection, describe, relation_exists, run
from strata_dagster.compile.relations import attached_catalog, source_database_path, source_relation
from strata_dagster.errors import E_OVERRIDE, E_SOURCE, StrataError, first_line
from strata_dagster.language.definition import Project, Source
from strata_dagster.sql.render import parse_table_name


def attach_source_databases(
    con: duckdb.DuckDBPyConnection, project: Project, *, is_strict: bool = True
) -> None:
    """ATTACH (read-only) every `database:` a source names, under a catalog named after the source.

    A database file that does not exist is an error when `is_strict`, else the source is skipped.
    """
    if all(source.database is None for source in project.sources.values()):
        return  # nothing to attach: no catalog query
    attached = {row[0] for row in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    for source in project.sources.values():
        if source.database is None or attached_catalog(source) in attached:
            continue
        path = source_database_path(source, project.root)
        assert path is not None
        if not path.exists():
            if not is_strict:
                continue
            raise StrataError(
                E_SOURCE,
                f"source `{source.name}` reads database `{source.database}`, which does not exist ({path})",
                source.location,
                hint="fix `database:` (relative paths start at the project folder)",
            )
        statement = exp.Attach(
            this=exp.alias_(exp.Literal.string(str(path)), attached_catalog(source)),
            exists=True,
            expressions=[exp.AttachOption(this=exp.var("READ_ONLY"))],
        )
        run(con, statement)


def is_stored_table(con: duckdb.DuckDBPyConnection, relation: exp.Table) -> bool:
    """Whether `relation` (catalog.schema.table, the schema `main` when not named) is a table of its
    attached database, its rows stored in that database's file (names matched as DuckDB matches
    them, whatever their case)."""
    found = run(
        con,
        exp.select(exp.func("count_star"))
        .from_(exp.Table(this=exp.func("duckdb_tables")))
        .where(
            exp.and_(
                exp.func("lower", exp.column("database_name")).eq(
                    exp.Literal.string(relation.catalog.lower())
                ),
                exp.func("lower", exp.column("schema_name")).eq(
                    exp.Literal.string((relation.db or "main").lower())
                ),
                exp.func("lower", exp.column("table_name")).eq(exp.Literal.string(relation.name.lower())),
                exp.not_(exp.column("temporary")),
            )
        ),
    ).fetchone()
    return bool(found and found[0])


def parse_overrides(
    pairs: Mapping[str, str] | list[str] | tuple[str, ...], project: Project
) -> dict[str, str]:
    """`["orders=fixes.orders", ...]` (or a mapping) -> {source: table}; E022 for anything malformed."""
    items: list[tuple[str, str]] = []
    if isinstance(pairs, Mapping):
        items = list(pairs.items())
    else:
        for pair in pairs:
            name, sep, target = pair.partition("=")
            if not sep or not name.strip() or not target.strip():
                raise StrataError(
                    E_OVERRIDE,
                    f"malformed source override `{pair}`",
                    hint="write `--source SOURCE=TABLE`, e.g. orders=fixes.orders",
                )
            items.append((name.strip(), target.strip()))
    overrides: dict[str, str] = {}
    for name, target in items:
        if name not in project.sources:
            raise StrataError(
                E_OVERRIDE,
                f"`--source {name}={target}` names no source of the project",
                hint="sources: " + ", ".join(sorted(project.sources)),
            )
        if any(not part for part in target.split(".")) or target.count(".") > 2:
            # Any other text is fine: it only ever becomes quoted identifiers, never SQL.
            raise StrataError(
                E_OVERRIDE, f"`{target}` is not a table name", hint="write `schema.table` or `table`"
            )
        overrides[name] = target
    return overrides


def source_table(source: Source, project: Project, overrides: Mapping[str, str]) -> exp.Table:
    if source.name in overrides:
        return parse_table_name(overrides[source.name])
    return source_relation(source, str(project.root))


def file_pattern(source: Source, project: Project) -> str:
    """The file pattern a `path:` source reads (its reader's first argument)."""
    relation = source_table(source, project, {})
    pattern = relation.this.expressions[0] if isinstance(relation.this, exp.Func) else None
    assert isinstance(pattern, exp.Literal)
    return pattern.this


def schema_relation(source: Source, project: Project, overrides: Mapping[str, str]) -> exp.Table:
    """What to describe for a source's schema: its relation, or for a business-versioned Parquet
    folder one of its files (read the same way, hive column included), which spares globbing and
    sniffing thousands of partition folders on every run."""
    relation = source_table(source, project, overrides)
    if (
        source.name in overrides
        or not source.is_business_versioned
        or not isinstance(relation.this, exp.Func)
    ):
        return relation
    from strata_dagster.backends.duckdb.partition_evidence import first_matching_file

    reader = relation.this
    pattern = reader.expressions[0]
    # One file of a complete partition: never listing every partition folder.
    column = None if source.partitioned_by is None else source.partitioned_by.column
    first = (
        first_matching_file(pattern.this, column, source.complete_when)
        if isinstance(pattern, exp.Literal)
        else None
    )
    if first is None:
        return relation
    one = reader.copy()
    one.expressions[0].replace(exp.Literal.string(first))
    return exp.Table(this=one)


def check_overrides_exist(con: Connection, overrides: Mapping[str, str]) -> None:
    for name, target in overrides.items():
        if not relation_exists(con, parse_table_name(target)):
            raise StrataError(
                E_OVERRIDE,
                f"`--source {name}={target}`: the warehouse has no table `{target}`",
                hint="create the corrected table first, or fix the name",
            )


def source_schemas(
    con: duckdb.DuckDBPyConnection, project: Project, overrides: Mapping[str, str]
) -> dict[str, tuple[tuple[str, str], ...]]:
    """(column, type) of every source that can be read now; unreadable sources are left out."""
    schemas = {}
    for name, source in project.sources.items():
        try:
            schemas[name] = describe(con, schema_relation(source, project, overrides))
        except (
            duckdb.CatalogException,
            duckdb.IOException,
            duckdb.BinderException,
            duckdb.InvalidInputException,
        ):
            continue
    return schemas


def source_schemas_with_databases(
    con: duckdb.DuckDBPyConnection, project: Project
) -> dict[str, tuple[tuple[str, str], ...]]:
    """Schemas for `strata check`/`compile`: sources that cannot be read now are left out."""
    attach_source_databases(con, project, is_strict=False)
    return source_schemas(con, project, {})


def unreadable_without_warehouse(project: Project, names: Iterable[str]) -> dict[str, str]:
    """The sources among `names` (files, or tables of another DuckDB database) that cannot be read
    now, each with DuckDB's first message line: described in an in-memory database, so that no
    warehouse has to exist."""
    con = connect_in_memory()
    try:
        attach_source_databases(con, project, is_strict=False)
        found = {}
        for name in names:
            try:
                describe(con, schema_relation(project.sources[name], project, {}))
            except duckdb.Error as error:
                found[name] = first_line(error)
        return found
    finally:
        con.close()
