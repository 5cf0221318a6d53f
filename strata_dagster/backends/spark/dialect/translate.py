"""Rewrite a statement built with DuckDB semantics into one that returns the same rows on Spark.

sqlglot's `write="spark"` alone mistranslates a number of DuckDB constructs without a word (a
division by zero, weekday numbers, month differences, list aggregates that lose their order or
their NULLs, ...: docs/spark_dialect.md lists each one as the Spark tier measured it). `to_spark`
runs, in order:

1. qualify the tree against the relations' schema: every `*` is expanded, so `* REPLACE`,
   `* EXCLUDE`, QUALIFY over `*` and the column order of `JOIN ... USING` are DuckDB's;
2. type it (sqlglot's annotator, with DuckDB's typing rules);
3. the rewrite rules of `rules`, children before parents, each `node -> node | None`;
4. check that nothing Spark lacks is left: a function Spark does not know, or a construct
   sqlglot's Spark generator marks unsupported.

What it cannot rewrite it refuses with `EngineDialectError` (E070). A rewrite that depends on a
type (a list's `len`, a decimal's `avg`, ...) is made when the type is known; when it is not, the
statement keeps the reading whose failure on Spark is an analysis error, never other rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import cast

from sqlglot import exp
from sqlglot.errors import ErrorLevel, OptimizeError, UnsupportedError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify_columns import qualify_columns, quote_identifiers, validate_qualify_columns
from sqlglot.optimizer.qualify_tables import qualify_tables
from sqlglot.schema import MappingSchema

from strata_dagster.backends.spark.dialect.functions import SPARK_CALL_KEYWORDS, SPARK_FUNCTIONS
from strata_dagster.backends.spark.dialect.rules import rewrite
from strata_dagster.backends.spark.dialect.support import SOURCE_DIALECT, EngineDialectError, refuse

__all__ = ["EngineDialectError", "SparkSchema", "statement_columns", "to_spark"]

# Relation name (`table`, `db.table` or `catalog.db.table`) -> column -> DuckDB type.
SparkSchema = Mapping[str, Mapping[str, str]]

# Words the Spark generator writes before a parenthesis that are not function calls.
_NOT_CALLS = frozenset(
    """in over as filter group values using on and or not exists where select from join except intersect
    union all by then else when case interval decimal numeric varchar char with distinct is like ilike
    rlike between lateral table partition rows cube rollup sets struct array map qualify""".split()
)
_STRING_OR_QUOTED = re.compile(r"'(?:[^'\\]|\\.|'')*'|`(?:[^`]|``)*`")
# A name before "(" that is not a table alias with its column list (`AS t(i)`).
_CALL = re.compile(r"(?<!AS )\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def to_spark(statement: exp.Expr, schema: SparkSchema | None = None) -> exp.Expr:
    """A copy of `statement` (DuckDB semantics) whose `.sql(dialect="spark")` returns on Spark 4.3 the
    rows DuckDB returns for the original. `schema` gives the columns (and DuckDB types) of the
    relations it reads; without them stars cannot be expanded, and what needs that is refused.
    Raises EngineDialectError (E070) for a construct that cannot be rewritten."""
    tree = _prepared(statement.copy())
    mapping = _mapping_schema(schema)
    is_qualified = _qualify(tree, mapping)
    annotate_types(tree, schema=mapping, dialect=SOURCE_DIALECT)
    tree = rewrite(tree)
    _check_stars(tree, is_qualified)
    check_spark_sql(tree)
    return tree


def statement_columns(statement: exp.Expr, schema: SparkSchema | None = None) -> dict[str, str] | None:
    """The output columns of `statement` with their DuckDB types (UNKNOWN where sqlglot cannot
    tell), or None when the schema does not cover it: what a model downstream is checked against."""
    tree = _prepared(statement.copy())
    mapping = _mapping_schema(schema)
    if not _qualify(tree, mapping):
        return None
    annotate_types(tree, schema=mapping, dialect=SOURCE_DIALECT)
    query = tree
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    return {
        item.alias_or_name: (item.type or exp.DataType.build("UNKNOWN")).sql(SOURCE_DIALECT)
        for item in query.expressions
    }


def check_spark_sql(tree: exp.Expr) -> None:
    """Refuse what sqlglot's Spark generator marks unsupported, and every call of a function Spark
    does not have (a DuckDB function passed through under its own name)."""
    try:
        text = tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as error:
        raise refuse(
            "a construct",
            f"sqlglot cannot write it for Spark ({error})",
            "rewrite the expression with functions both backends share",
        ) from None
    for name in _CALL.findall(_STRING_OR_QUOTED.sub("''", text)):
        word = name.lower()
        if word in _NOT_CALLS or word in SPARK_FUNCTIONS or word in SPARK_CALL_KEYWORDS:
            continue
        node = next(
            (
                found
                for found in tree.find_all(exp.Func)
                if isinstance(found, exp.Anonymous) and found.name.lower() == word
            ),
            None,
        )
        raise refuse(
            f"{word}(...)",
            f"`{word}` is a DuckDB function Spark does not have",
            "write it with functions both backends share (docs/spark_dialect.md lists what is rewritten)",
            node,
        )


def _prepared(tree: exp.Expr) -> exp.Expr:
    """Normalise what sqlglot's optimizer expects and the compiler builds otherwise: table aliases as
    TableAlias (the builders leave a bare identifier), and `UNNEST(x) AS name` in a select list as
    the `EXPLODE(x) AS name` DuckDB's own parser gives."""
    for node in list(tree.find_all(exp.Table, exp.Subquery)):
        alias = node.args.get("alias")
        if isinstance(alias, exp.Identifier):
            node.set("alias", exp.TableAlias(this=alias))
    for select in list(tree.find_all(exp.Select)):
        for item in select.expressions:
            if isinstance(item, exp.Unnest) and len(item.expressions) == 1:
                alias = item.args.get("alias")
                name = alias.this if isinstance(alias, exp.TableAlias) else alias
                explode = exp.Explode(this=item.expressions[0])
                item.replace(exp.alias_(explode, name) if name is not None else explode)
    rename_nested_ctes(tree)
    for node in list(tree.find_all(exp.Distinct)):
        if node.args.get("on") is not None:
            raise refuse(
                "DISTINCT ON",
                "Spark has no DISTINCT ON",
                "keep one row per key with row_number() in a derive and a filter on it",
                node,
            )
    return tree


def rename_nested_ctes(tree: exp.Expr) -> None:
    """Give the CTEs of a nested query (an upstream model bound as a subquery) names of their own,
    in place: Spark's generator lifts every CTE to the top, where two `__base` would collide."""
    nested = [node for node in tree.find_all(exp.Query) if node is not tree and node.args.get("with_")]
    if not nested:
        return
    # Each table reads the CTE of its nearest enclosing query that defines the name.
    readers: list[tuple[exp.Table, exp.Expr]] = []
    for table in tree.find_all(exp.Table):
        if table.args.get("db"):
            continue
        scope = table.parent
        while scope is not None:
            with_ = scope.args.get("with_") if isinstance(scope, exp.Query) else None
            if with_ is not None and any(cte.alias == table.name for cte in with_.expressions):
                readers.append((table, scope))
                break
            scope = scope.parent
    for number, query in enumerate(nested, start=1):
        names = {cte.alias: f"{cte.alias}_{number}" for cte in query.args["with_"].expressions}
        for cte in query.args["with_"].expressions:
            cte.set("alias", exp.TableAlias(this=exp.to_identifier(names[cte.alias])))
        for table, scope in readers:
            if scope is query and table.name in names:
                if table.args.get("alias") is None:
                    table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
                table.set("this", exp.to_identifier(names[table.name]))


def _mapping_schema(schema: SparkSchema | None) -> MappingSchema:
    """A case-preserving sqlglot schema. Relations of mixed depths (`t` and `db.t`) are keyed by
    their last name part, which is what a table of the statement is matched on."""
    relations = dict(schema or {})
    depths = {name.count(".") for name in relations}
    nested: dict[str, object] = {}
    for name, columns in relations.items():
        parts = name.split(".") if len(depths) == 1 else [name.split(".")[-1]]
        level = nested
        for part in parts[:-1]:
            level = cast("dict[str, object]", level.setdefault(part, {}))  # a level is a dict
        level[parts[-1]] = dict(columns)
    return MappingSchema(nested, dialect=SOURCE_DIALECT, normalize=False)


def _qualify(tree: exp.Expr, schema: MappingSchema) -> bool:
    """Qualify columns and expand stars in place; False when the schema does not cover the tree
    (the tree is then left as it was, with its stars)."""
    attempt = tree.copy()
    try:
        qualify_tables(attempt, dialect=SOURCE_DIALECT)
        qualify_columns(attempt, schema, expand_alias_refs=True, expand_stars=True, dialect=SOURCE_DIALECT)
        validate_qualify_columns(attempt)
    except OptimizeError:
        return False
    quote_identifiers(attempt, dialect=SOURCE_DIALECT, identify=True)
    if any(isinstance(star, exp.Star) for star in attempt.find_all(exp.Star) if not _is_count_star(star)):
        return False
    for key, value in attempt.args.items():
        tree.set(key, value)
    return True


def _is_count_star(star: exp.Star) -> bool:
    return isinstance(star.parent, (exp.Count, exp.AggFunc)) or isinstance(star.parent, exp.Func)


def _check_stars(tree: exp.Expr, is_qualified: bool) -> None:
    """With stars left unexpanded (columns unknown), refuse what only an expansion makes right."""
    if is_qualified:
        return
    for star in tree.find_all(exp.Star):
        if _is_count_star(star):
            continue
        if star.args.get("replace"):
            raise refuse(
                "* REPLACE",
                "Spark has no `* REPLACE`, and the columns it would expand to are not known",
                "give the engine the input's schema (a warehouse where the source is loaded)",
                star,
                needs_schema=True,
            )
        select = star.find_ancestor(exp.Select)
        if select is not None and select.args.get("qualify") is not None:
            raise refuse(
                "QUALIFY over *",
                "Spark's QUALIFY over `*` leaks a helper column unless `*` is expanded, and the columns are not known",
                "give the engine the input's schema, or select the columns explicitly",
                star,
                needs_schema=True,
            )
        if select is not None and any(join.args.get("using") for join in select.args.get("joins") or ()):
            raise refuse(
                "JOIN ... USING with *",
                "Spark puts the USING columns first, DuckDB keeps the left side's order, and the columns are not known",
                "give the engine the input's schema, or select the columns explicitly",
                star,
                needs_schema=True,
            )
    for union in tree.find_all(exp.Union):
        if union.args.get("by_name"):
            raise refuse(
                "UNION BY NAME",
                "Spark has no UNION BY NAME, and the columns of its sides are not known",
                "give the engine the inputs' schemas, or match the columns by position",
                union,
                needs_schema=True,
            )
