"""Deterministic windows (seed 003): identical inputs must give identical rows.

A window function such as row_number() ordered by columns that can tie gives an arbitrary
order among the ties. With an `order_by` property its columns are appended to every such
window's ORDER BY as tie-breakers; without one, the model gets warning W001 naming the fix.
"""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.errors import W_NONDETERMINISTIC_WINDOW, StrataWarning
from strata_dagster.language.definition import Model

# Functions whose result depends on the order of peers (ties) in their window.
ORDER_SENSITIVE = (
    exp.RowNumber,
    exp.Lag,
    exp.Lead,
    exp.FirstValue,
    exp.LastValue,
    exp.NthValue,
)
ORDER_SENSITIVE_NAMES = {"row_number", "lag", "lead", "first_value", "last_value", "nth_value", "ntile"}


def _is_order_sensitive(window: exp.Window) -> bool:
    function = window.this
    if isinstance(function, ORDER_SENSITIVE):
        return True
    name = function.sql_name().lower() if isinstance(function, exp.Func) else ""
    return name in ORDER_SENSITIVE_NAMES


def _order_names(window: exp.Window) -> list[str]:
    order = window.args.get("order")
    if order is None:
        return []
    return [ordered.this.name for ordered in order.expressions if isinstance(ordered.this, exp.Column)]


def make_windows_deterministic(model: Model, statement: exp.Select) -> tuple[exp.Select, list[StrataWarning]]:
    """The statement with tie-breakers added (from `order_by`), and warnings for windows left open."""
    props = model.properties
    warnings: list[StrataWarning] = []
    tie_breakers = list(props.order_by or ())
    unique = set(props.unique or ())
    statement = statement.copy()
    for window in list(statement.find_all(exp.Window)):
        if not _is_order_sensitive(window):
            continue
        ordered = _order_names(window)
        partition = [
            node.name for node in window.args.get("partition_by") or () if isinstance(node, exp.Column)
        ]
        if unique and unique <= set(ordered) | set(partition):
            continue  # ordered by a pinned-unique key: no ties
        if tie_breakers:
            missing = [name for name in tie_breakers if name not in ordered]
            if missing:
                order = window.args.get("order") or exp.Order(expressions=[])
                order.set(
                    "expressions",
                    [*order.expressions, *(exp.Ordered(this=exp.column(name)) for name in missing)],
                )
                window.set("order", order)
            continue
        warnings.append(
            StrataWarning(
                W_NONDETERMINISTIC_WINDOW,
                f"model `{model.name}`: `{window.sql(dialect='duckdb')}` may order tied rows arbitrarily, "
                "so identical inputs could give different rows",
                model.location,
                hint="add `order_by: [col, ...]` with columns that make the order unique; they are appended "
                "to the window's ORDER BY as tie-breakers",
            )
        )
    return statement, warnings
