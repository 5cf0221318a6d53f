"""Parse the SQL expressions inside steps and properties with sqlglot (DuckDB dialect)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from strata_dagster.errors import E_EXPRESSION, Location, StrataError

DIALECT = "duckdb"
_PREFIX = "SELECT "
# Node positions (sqlglot meta "start") count this prefix.
PREFIX_LENGTH = len(_PREFIX)


def shift(location: Location, text: str, offset: int) -> Location:
    """The file position of `offset` characters into `text`, which starts at `location`."""
    before = text[:offset]
    newlines = before.count("\n")
    if newlines == 0:
        return Location(location.file, location.line, location.column + offset)
    return Location(location.file, location.line + newlines, offset - before.rfind("\n"))


def parse_item(text: str, location: Location, *, allow_alias: bool) -> exp.Expr:
    """One projection item: an expression, with `AS name` only where `allow_alias`."""
    try:
        statement = sqlglot.parse_one(_PREFIX + text, read=DIALECT)
    except ParseError as error:
        detail = error.errors[0] if error.errors else {}
        description = str(detail.get("description", error))
        if description.startswith("Required keyword"):
            description = "the expression is incomplete"
        raise StrataError(
            E_EXPRESSION,
            f"not a valid SQL expression: {description}",
            _error_location(text, location, detail),
            hint="expressions are DuckDB SQL, e.g. `amount * 1.1` or `coalesce(a, b)`",
        ) from None
    except (RecursionError, ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
        # sqlglot can fail this way on garbage input; the user still deserves a coded error.
        raise StrataError(
            E_EXPRESSION, f"not a valid SQL expression ({type(error).__name__})", location
        ) from None
    items = statement.expressions if isinstance(statement, exp.Select) else []
    if isinstance(statement, exp.Select) and statement.args.get("distinct"):
        raise StrataError(
            E_EXPRESSION,
            "DISTINCT has no meaning in a step item",
            location,
            hint="for distinct rows, `group` by the columns (e.g. `group a, b`)",
        )
    if (
        not isinstance(statement, exp.Select)
        or len(items) != 1
        or any(value for key, value in statement.args.items() if key != "expressions")
    ):
        raise StrataError(
            E_EXPRESSION,
            f"`{text}` is not a single SQL expression",
            location,
            hint="write one expression; separate list items with commas",
        )
    item = items[0]
    nested = _nested_alias(item)
    if nested is not None:
        raise StrataError(
            E_EXPRESSION,
            f"`{text}` renames a value with AS inside the expression, which is not SQL",
            _node_location(nested.args["alias"], text, location),
            hint="for a type conversion write `cast(x as date)`; "
            "name a column with `name = expr`, or `expr as name` in group / select / expand",
        )
    if isinstance(item, exp.Alias) and not allow_alias:
        raise StrataError(
            E_EXPRESSION,
            f"`{text}` renames its value with AS, which has no meaning here",
            location,
            hint="drop the `as name`; name computed columns with `name = expr` where the step allows it",
        )
    return item


def is_type(text: str) -> bool:
    """Whether `text` names a DuckDB type sqlglot knows (`BIGINT`, `DECIMAL(18, 2)`, `INT[]`, ...)."""
    try:
        # Parsed into a DataType, trailing words fail instead of being dropped (`BIGINT LEFT`).
        parsed = sqlglot.parse_one(text, read=DIALECT, into=exp.DataType)
    except (ParseError, RecursionError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False
    return isinstance(parsed, exp.DataType) and parsed.this != exp.DataType.Type.USERDEFINED


def _nested_alias(item: exp.Expr) -> exp.Alias | None:
    """An `x AS y` below the item's top, outside any subquery's own SELECT list (`(ts as date)`)."""
    return next(
        (
            node
            for node in item.find_all(exp.Alias)
            if node is not item and not isinstance(node.parent, exp.Select)
        ),
        None,
    )


def _node_location(node: exp.Expr, text: str, location: Location) -> Location:
    start = node.meta.get("start")
    if not isinstance(start, int):
        return location
    return shift(location, text, min(max(start - PREFIX_LENGTH, 0), len(text)))


def _error_location(text: str, location: Location, detail: dict[str, object]) -> Location:
    line = detail.get("line")
    col = detail.get("col")
    if not isinstance(line, int) or not isinstance(col, int):
        return location
    # sqlglot's column is the 1-based position of the last character of the offending token.
    highlight = detail.get("highlight")
    start = col - (len(highlight) if isinstance(highlight, str) and highlight else 1)
    lines = (_PREFIX + text).split("\n")
    offset = sum(len(part) + 1 for part in lines[: line - 1]) + max(start, 0) - len(_PREFIX)
    return shift(location, text, min(max(offset, 0), len(text)))
