"""Whole-row hashes that tell 128-bit integers apart, in DuckDB.

DuckDB hashes a 128-bit integer (HUGEINT, UHUGEINT, a DECIMAL of more than 18 digits) as the XOR
of the hashes of its two 64-bit halves, so -1 and 0 both hash to 0, and so do two rows that differ
only there: a `sum` over integers is a HUGEINT, and a total going from -1 to 0 (or an amount from
-0.01 to 0.00 in a DECIMAL(38,2)) left a content identity unchanged. A whole-row hash
(`hash(__strata_row)`, sql.content) over a relation with such a column hashes instead a struct of
the row's columns with each of those as the 64-bit value it fits in (TRY_CAST, nearly free) and,
when it does not fit, as text. A hash of some of the row's columns (`hash(__strata_row.key,
__strata_row.cdc)`, an upsert's key-and-change-column figures) encodes those of its columns that
are 128-bit the same way. Relations without such a column hash as before.
"""

from __future__ import annotations

import re

import duckdb
from sqlglot import exp

from strata_dagster.sql.content import ROW_ALIAS, row_source
from strata_dagster.sql.render import render

# How a hash of the row or of its columns renders: a statement without one is run as it is.
MARKER = f"HASH({ROW_ALIAS}"
# 128-bit scalar types and the 64-bit types their values are tried in.
_NARROWER = {"HUGEINT": "BIGINT", "UHUGEINT": "UBIGINT"}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
_WIDE_INSIDE = re.compile(r"\bU?HUGEINT\b|DECIMAL\((19|[2-3]\d),")


def encoded(con: duckdb.DuckDBPyConnection, statement: exp.Expr) -> exp.Expr | None:
    """A copy of `statement` whose whole-row hashes over relations with 128-bit columns hash
    those columns encoded; None when no relation it hashes has one (the statement stands, and
    is not copied)."""
    described: dict[str, list[tuple[str, str]]] = {}
    if not any(_encoding(con, node, described) is not None for node in _row_hashes(statement)):
        return None
    tree = statement.copy()
    for node in _row_hashes(tree):
        arguments = _encoding(con, node, described)
        if arguments is not None:
            node.set("expressions", arguments)
    return tree


def _encoding(
    con: duckdb.DuckDBPyConnection, node: exp.Anonymous, described: dict[str, list[tuple[str, str]]]
) -> list[exp.Expr] | None:
    """The arguments that hash what `node` hashes with its 128-bit columns encoded; None when it
    hashes none (a hash of some columns, none of them 128-bit, stays as it is)."""
    columns = _wide_columns(con, node, described)
    if not columns:
        return None
    if _is_whole_row_hash(node):
        return [_row_struct(columns)]
    types = dict(columns)
    if not any(_is_wide(types.get(argument.name, "")) for argument in node.expressions):
        return None
    return [
        _value(argument.name, types[argument.name]) if argument.name in types else argument
        for argument in node.expressions
    ]


def _row_hashes(tree: exp.Expr) -> list[exp.Anonymous]:
    return [
        node for node in tree.find_all(exp.Anonymous) if _is_whole_row_hash(node) or _is_columns_hash(node)
    ]


def _wide_columns(
    con: duckdb.DuckDBPyConnection, node: exp.Anonymous, described: dict[str, list[tuple[str, str]]]
) -> list[tuple[str, str]]:
    """The columns of the relation the hash's SELECT reads as `__strata_row`, when one of them is
    128-bit (and their names are distinct); else none. Each relation is described once."""
    select = node.find_ancestor(exp.Select)
    source = row_source(select) if select is not None else None
    if source is None:
        return []
    key = render(exp.Describe(this=exp.select("*").from_(source.copy())))
    if key not in described:
        described[key] = [(str(row[0]), str(row[1])) for row in con.execute(key).fetchall()]
    columns = described[key]
    names = [name for name, _ in columns]
    if len(set(names)) != len(names) or not any(_is_wide(type_name) for _, type_name in columns):
        return []
    return columns


def _is_whole_row_hash(node: exp.Anonymous) -> bool:
    if node.name.lower() != "hash" or len(node.expressions) != 1:
        return False
    argument = node.expressions[0]
    return isinstance(argument, exp.Column) and not argument.table and argument.name == ROW_ALIAS


def _is_columns_hash(node: exp.Anonymous) -> bool:
    """`hash(__strata_row.a, __strata_row.b, ...)`: a hash of some of the row's columns."""
    return (
        node.name.lower() == "hash"
        and bool(node.expressions)
        and all(
            isinstance(argument, exp.Column) and argument.table == ROW_ALIAS for argument in node.expressions
        )
    )


def _is_wide(type_name: str) -> bool:
    return bool(_WIDE_INSIDE.search(type_name.upper()))


def _row_struct(columns: list[tuple[str, str]]) -> exp.Expr:
    fields = [
        exp.PropertyEQ(this=exp.to_identifier(name), expression=_value(name, type_name))
        for name, type_name in columns
    ]
    return exp.Struct(expressions=fields)


def _value(name: str, type_name: str) -> exp.Expr:
    column = exp.column(name, table=ROW_ALIAS, quoted=True)
    if not _is_wide(type_name):
        return column
    narrower = _narrower(type_name.upper())
    if narrower is None:  # nested, or a scale no 64-bit DECIMAL holds: text
        return exp.cast(column, "VARCHAR")
    fits = exp.TryCast(this=column.copy(), to=exp.DataType.build(narrower, dialect="duckdb"))
    text = exp.If(
        this=exp.and_(
            exp.not_(exp.Is(this=column.copy(), expression=exp.null())),
            exp.Is(this=fits.copy(), expression=exp.null()),
        ),
        true=exp.cast(column.copy(), "VARCHAR"),
    )
    return exp.Struct(
        expressions=[
            exp.PropertyEQ(this=exp.to_identifier("v"), expression=fits),
            exp.PropertyEQ(this=exp.to_identifier("t"), expression=text),
        ]
    )


def _narrower(type_name: str) -> str | None:
    if type_name in _NARROWER:
        return _NARROWER[type_name]
    match = _DECIMAL.fullmatch(type_name)
    if match is not None and int(match.group(2)) <= 18:
        return f"DECIMAL(18,{match.group(2)})"
    return None
