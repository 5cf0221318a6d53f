"""The engine's statements, built with DuckDB semantics as sqlglot trees, as Spark SQL.

The warehouse code builds every statement once, for DuckDB; these rules turn a copy of a tree into
one Spark 4 runs with the same meaning (docs/spark.md): snapshots become Parquet tables, content
hashes become 64-bit xxhash sums with NULL markers in DECIMAL(38,0) (never Spark's 32-bit `hash`,
which also ignores NULL positions), and DuckDB-only spellings become Spark's. A model's own SQL
goes through the language-level rewrites (backends.spark.dialect.translate) as well.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from strata_dagster.backends.spark.dialect.translate import rename_nested_ctes
from strata_dagster.sql.content import ROW_ALIAS
from strata_dagster.sql.render import SNAPSHOT_SCHEMA

DIALECT = "spark"
# Integer types wider than Spark's BIGINT hold sums of 64-bit hashes: DECIMAL(38,0) holds them
# (a sum of 10^19 hashes would not overflow it) and compares exactly.
_WIDE_INTEGERS = {exp.DataType.Type.INT128, exp.DataType.Type.UINT128, exp.DataType.Type.UBIGINT}
_READERS = {"read_parquet": "parquet", "read_csv_auto": "csv", "read_csv": "csv", "read_json_auto": "json"}


def _wide_integers(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.DataType) and node.this in _WIDE_INTEGERS:
        return exp.DataType.build("DECIMAL(38,0)")
    return node


def _count_star(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous) and node.name.lower() == "count_star":
        return exp.Count(this=exp.Star())
    return node


def _is_whole_row(argument: exp.Expr) -> bool:
    """`hash(__strata_row)`: DuckDB hashes the row alias as one struct."""
    return isinstance(argument, exp.Column) and not argument.table and argument.name == ROW_ALIAS


def _marked(arguments: list[exp.Expr]) -> exp.Expr:
    """Spark's xxhash64 skips NULL arguments: each value goes with an IS NULL marker, so (NULL, 1)
    and (1, NULL) hash apart (never Spark's 32-bit `hash`)."""
    marked: list[exp.Expr] = []
    for argument in arguments:
        marked.append(exp.Is(this=argument.copy(), expression=exp.null()))
        marked.append(argument.copy())
    return exp.func("xxhash64", *marked)


def _row_hash(node: exp.Expr, row_columns: Callable[[exp.Select], list[str]]) -> exp.Expr:
    """DuckDB's `hash(...)` as Spark's xxhash64 with NULL markers; a whole row (`hash(__strata_row)`)
    as every column of the row, named (Spark refuses `*` in an aggregate query)."""
    if not (isinstance(node, exp.Anonymous) and node.name.lower() == "hash"):
        return node
    arguments = list(node.expressions)
    if len(arguments) == 1 and _is_whole_row(arguments[0]):
        select = node.find_ancestor(exp.Select)
        assert select is not None, "a whole-row hash outside a SELECT"
        arguments = [exp.column(name, table=ROW_ALIAS) for name in row_columns(select)]
    return _marked(arguments)


def _group_by_ordinals(node: exp.Expr) -> exp.Expr:
    """GROUP BY 1 as GROUP BY <the first select expression>: Spark refuses ordinals in a query
    whose select list has a star anywhere (the whole-row hash's `struct(__strata_row.*)`)."""
    if not isinstance(node, exp.Select):
        return node
    group = node.args.get("group")
    if group is None:
        return node
    projections = node.expressions
    replaced = []
    for item in group.expressions:
        if isinstance(item, exp.Literal) and item.is_int and 0 < int(item.this) <= len(projections):
            chosen = projections[int(item.this) - 1]
            replaced.append((chosen.this if isinstance(chosen, exp.Alias) else chosen).copy())
        else:
            replaced.append(item)
    group.set("expressions", replaced)
    return node


def _is_segment_read(query: exp.Expr) -> bool:
    """`SELECT * FROM strata_snapshots.<table>` (with a WHERE, for an upsert's replaced keys)."""
    if isinstance(query, exp.Union):
        return _is_segment_read(query.this) and _is_segment_read(query.expression)
    if not isinstance(query, exp.Select) or not query.is_star:
        return False
    source = query.args.get("from_") or query.args.get("from")
    table = source.this if source is not None else None
    return isinstance(table, exp.Table) and table.db == SNAPSHOT_SCHEMA


def _segments_by_position(node: exp.Expr) -> exp.Expr:
    """The segments of one state, UNION ALL BY NAME in DuckDB: Spark has no BY NAME, and the
    segments of a state have one schema in one column order (a schema change builds in full)."""
    if isinstance(node, exp.Union) and node.args.get("by_name") and _is_segment_read(node):
        node.set("by_name", None)
    return node


def _file_reader_name(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
        function = node.this
        name = function.name.lower() if isinstance(function, exp.Anonymous) else function.sql_name().lower()
        return _READERS.get(name)
    return None


RULES: tuple[Callable[[exp.Expr], exp.Expr], ...] = (
    _wide_integers,
    _count_star,
    _group_by_ordinals,
    _segments_by_position,
)


_CHANGING_COLUMNS = ("joins", "group", "laterals", "distinct", "pivots")


def named_like(relation: exp.Expr) -> exp.Expr:
    """The relation whose column names `relation`'s are, looking through subqueries that only
    filter (`SELECT * FROM r WHERE ...`) and set operations (named by their first branch): a
    replaced-rows query is then described as the snapshot it reads, not analysed in full."""
    while True:
        query = relation.this if isinstance(relation, exp.Subquery) else None
        while isinstance(query, exp.SetOperation):
            query = query.this
        if not isinstance(query, exp.Select) or query.args.get("with_"):
            return relation
        projections = query.expressions
        source = query.args.get("from_")
        if not (
            len(projections) == 1
            and type(projections[0]) is exp.Star
            and not any(projections[0].args.values())
            and source is not None
            and not any(query.args.get(arg) for arg in _CHANGING_COLUMNS)
        ):
            return relation
        relation = source.this


def rewrite(
    statement: exp.Expr,
    relations: Callable[[exp.Table, str], exp.Expr],
    row_columns: Callable[[exp.Select], list[str]],
) -> exp.Expr:
    """A copy of `statement` for Spark. `relations` turns a DuckDB file read (`read_parquet(...)`
    and friends, with the reader's format) into a relation Spark reads; `row_columns` names the
    columns of a SELECT's `__strata_row` relation, for whole-row hashes."""

    def apply(node: exp.Expr) -> exp.Expr:
        reader = _file_reader_name(node)
        if reader is not None and isinstance(node, exp.Table):  # a reader is only ever a table's
            return relations(node, reader)
        node = _row_hash(node, row_columns)
        for rule in RULES:
            node = rule(node)
        return node

    tree = statement.copy().transform(apply, copy=False)
    # Models inlined into one query at run time (a catalog's partition bounds) nest their CTEs.
    rename_nested_ctes(tree)
    return tree


def snapshot_ddl(statement: exp.Expr) -> exp.Expr:
    """CREATE TABLE ... AS as an immutable Parquet table (Spark has no CREATE OR REPLACE TABLE AS
    on Parquet: the caller drops a leftover first)."""
    if isinstance(statement, exp.Create) and statement.kind == "TABLE":
        statement.set("replace", False)
        statement.set(
            "properties", exp.Properties(expressions=[exp.FileFormatProperty(this=exp.var("PARQUET"))])
        )
    return statement
