"""Which columns an expression may use at a point of a pipeline, and the errors when it uses others."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlglot import exp

from strata_dagster.errors import E_UNKNOWN_COLUMN, Location, StrataError
from strata_dagster.language.definition import Expr
from strata_dagster.language.expressions import PREFIX_LENGTH, shift

Columns = tuple[str, ...] | None  # None: not known (a source whose schema was not read)


@dataclass
class Scope:
    """Columns visible to a step: unqualified names, and the relations that qualify them."""

    columns: Columns
    relations: dict[str, Columns] = field(default_factory=dict)

    def copy(self) -> Scope:
        return Scope(self.columns, dict(self.relations))


def column_references(node: exp.Expr) -> list[exp.Column]:
    """Column nodes an expression reads (lambda parameters are identifiers, not columns, in sqlglot)."""
    return [column for column in node.find_all(exp.Column) if not isinstance(column.this, exp.Star)]


def referenced_names(node: exp.Expr) -> set[str]:
    """Names an expression reads: columns, and qualifiers (a struct column `s` in `s.a`)."""
    names = set()
    for column in column_references(node):
        names.add(column.name)
        if column.table:
            names.add(column.table)
    return names


def has_window(node: exp.Expr) -> bool:
    return node.find(exp.Window) is not None


def check_expression(expr: Expr, scope: Scope, *, model: str, node: exp.Expr | None = None) -> None:
    """Raise E009 for the first column the expression reads that the scope does not have."""
    for column in column_references(node if node is not None else expr.node):
        _check_column(column, expr, scope, model)


def _check_column(column: exp.Column, expr: Expr, scope: Scope, model: str) -> None:
    qualifier = column.table
    name = column.name
    location = _column_location(column, expr)
    if qualifier:
        if qualifier in scope.relations:
            known = scope.relations[qualifier]
            if known is not None and name not in known:
                raise unknown_column(name, known, model, location, relation=qualifier)
            return
        if scope.columns is None or qualifier in scope.columns:
            return  # a struct field, or a qualifier we cannot check without the schema
        raise StrataError(
            E_UNKNOWN_COLUMN,
            f"`{qualifier}.{name}` in model `{model}`: `{qualifier}` is neither a relation nor a column here",
            location,
            hint=_relations_hint(scope),
        )
    if scope.columns is None or name in scope.columns:
        if scope.columns is not None and scope.columns.count(name) > 1:
            owners = [rel for rel, cols in scope.relations.items() if cols is not None and name in cols]
            raise StrataError(
                E_UNKNOWN_COLUMN,
                f"column `{name}` in model `{model}` is ambiguous: {' and '.join(f'`{o}`' for o in owners)} both have it",
                location,
                hint=f"qualify it with its relation, e.g. `{(owners or ['relation'])[0]}.{name}`",
            )
        return
    raise unknown_column(name, scope.columns, model, location)


def unknown_column(
    name: str, known: Iterable[str], model: str, location: Location | None, *, relation: str | None = None
) -> StrataError:
    known = list(dict.fromkeys(known))
    where = f"`{relation}`" if relation else "its input here"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean `{close[0]}`? " if close else ""
    shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
    return StrataError(
        E_UNKNOWN_COLUMN,
        f"model `{model}` uses column `{name}`, which {where} does not have",
        location,
        hint=f"{hint}available columns: {shown}",
    )


def _relations_hint(scope: Scope) -> str:
    if scope.relations:
        return "relations here: " + ", ".join(scope.relations)
    return "after derive, group, select or a set operation, refer to columns by their output names"


def _column_location(column: exp.Column, expr: Expr) -> Location:
    first = column.args.get("table") or column.this
    start = first.meta.get("start") if isinstance(first, exp.Expression) else None
    if isinstance(start, int) and 0 <= start - PREFIX_LENGTH <= len(expr.text):
        return shift(expr.location, expr.text, start - PREFIX_LENGTH)
    return expr.location
