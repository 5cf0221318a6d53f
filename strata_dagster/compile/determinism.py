"""Determinism (docs/architecture.md, R12): identical inputs must give identical rows, or the model must say so.

A window function such as row_number() ordered by columns that can tie gives an arbitrary
order among the ties. With an `order_by` property its columns are appended to every such
window's ORDER BY as tie-breakers; without one, the model gets warning W001 naming the fix.

A volatile function (now(), current_date, random(), uuid(), nextval(...)) makes the rows depend
on when the model runs, which no input fingerprint sees. Such a model is rebuilt on every run
unless its `refresh:` allows reusing a build within an hour or a day; without `refresh:` it gets
warning W002 naming the choice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.errors import W_NONDETERMINISTIC_WINDOW, W_VOLATILE, Location, StrataWarning
from strata_dagster.language.definition import (
    AggregateStep,
    DeriveStep,
    ExpandStep,
    Expr,
    FilterStep,
    GroupStep,
    JoinStep,
    LetStep,
    Model,
    Refresh,
    SelectStep,
)

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


def _tie_breaker(select: exp.Select | None, name: str) -> exp.Expr | None:
    """What the output column `name` is computed from, as the window's own SELECT sees it: a window is
    evaluated before the projection names its columns, so `customer_id` of a join must be written
    `stg_orders.customer_id`, and a computed column as its expression. None: the column is itself a
    window's result (no tie-breaker for a window can be one)."""
    for projection in select.expressions if select is not None else ():
        if projection.alias_or_name == name:
            value = projection.this if isinstance(projection, exp.Alias) else projection
            if isinstance(value, exp.Star):
                break
            return None if value.find(exp.Window) else value.copy()
    return exp.column(name)


_JOINED = exp.Null()  # `_through_stage`: the expression reads a joined relation's column there


def _tie_breaker_below(
    statement: exp.Select, select: exp.Select | None, name: str, base_columns: Sequence[str] | None
) -> exp.Expr | None:
    """The model's output column `name` as the SELECT that computes the window can compute it:
    followed down through the stages above that SELECT, each stage's projection put in place of
    the column it names (`select order_id as id` gives `order_id`; `select amount * 2 as twice`
    gives `amount * 2`), then `_tie_breaker` for each column left. None when `name` is computed
    from a window or an aggregate above the window, `_JOINED` when it is taken from a relation
    joined above it: neither has a value where the window is computed, so neither can break its
    ties."""
    stages = {cte.alias: cte.this for cte in (statement.args.get("with_") or exp.With()).expressions}
    expression: exp.Expr = exp.column(name)
    current: exp.Expr | None = statement
    while current is not select and isinstance(current, exp.Select):
        source = current.args.get("from_")
        below = source.this if source is not None else None
        if not isinstance(below, exp.Table) or below.name not in stages:
            break
        from_below = _outputs(stages[below.name], stages, base_columns) if current.args.get("joins") else None
        rewritten = _through_stage(expression, current, below.alias_or_name, from_below)
        if rewritten is None or rewritten is _JOINED:
            return rewritten
        expression = rewritten
        current = stages[below.name]
    return _over_window_select(expression, select)


def _through_stage(
    expression: exp.Expr, stage: exp.Select, below: str, from_below: set[str] | None
) -> exp.Expr | None:
    """`expression` over the output of `stage`, rewritten over the output of the relation `stage`
    reads from (named `below` in it; `from_below` its columns when `stage` joins others to it and
    they are known). None when a column it reads is a window's or an aggregate's; `_JOINED` when
    one is a joined relation's."""
    projections = {
        projection.alias_or_name: projection.this if isinstance(projection, exp.Alias) else projection
        for projection in stage.expressions
        if not isinstance(projection, exp.Star)
    }
    rewritten = expression.copy()
    for column in list(rewritten.find_all(exp.Column)):
        value = projections.get(column.name)
        if value is None:
            continue  # passed through by `*`
        if value.find(exp.Window, exp.AggFunc):
            return None
        if any(_is_joined(inner, below, from_below) for inner in value.find_all(exp.Column)):
            return _JOINED
        replacement = value.copy()
        for inner in replacement.find_all(exp.Column):
            inner.set("table", None)
        if column is rewritten:
            rewritten = replacement
        else:
            column.replace(replacement)
    return rewritten


def _is_joined(column: exp.Column, below: str, from_below: set[str] | None) -> bool:
    """Whether `column`, in a stage reading `below`, is another relation's: qualified by another
    name, or unqualified in a stage with joins and not among `below`'s known columns."""
    if column.table:
        return column.table != below
    return from_below is not None and column.name not in from_below


def _outputs(
    stage: exp.Select, stages: dict[str, exp.Select], base_columns: Sequence[str] | None
) -> set[str] | None:
    """The names of the columns `stage` outputs; None when a `*` passes columns not known here
    (a joined relation's, or the base relation's when its columns are not known)."""
    names = {
        projection.alias_or_name for projection in stage.expressions if not isinstance(projection, exp.Star)
    }
    if not any(isinstance(projection, exp.Star) for projection in stage.expressions):
        return names
    if stage.args.get("joins"):
        return None
    source = stage.args.get("from_")
    below = source.this if source is not None else None
    if isinstance(below, exp.Table) and below.name in stages:
        passed = _outputs(stages[below.name], stages, base_columns)
    else:
        passed = set(base_columns) if base_columns is not None else None
    return None if passed is None else names | passed


def _over_window_select(expression: exp.Expr, select: exp.Select | None) -> exp.Expr | None:
    """`expression`, over the output names of the window's SELECT, as that SELECT computes it."""
    if isinstance(expression, exp.Column):
        return _tie_breaker(select, expression.name)
    rewritten = expression.copy()
    for column in list(rewritten.find_all(exp.Column)):
        value = _tie_breaker(select, column.name)
        if value is None:
            return None
        column.replace(value)
    return rewritten


def make_windows_deterministic(
    model: Model, statement: exp.Select, base_columns: Sequence[str] | None = None
) -> tuple[exp.Select, list[StrataWarning]]:
    """The statement with tie-breakers added (from `order_by`), and warnings for windows left open.
    `base_columns`: the columns of the model's `from`, when known (where a column of a join comes from)."""
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
            select = window.find_ancestor(exp.Select)
            found = {
                name: _tie_breaker_below(statement, select, name, base_columns)
                for name in tie_breakers
                if name not in ordered and name not in partition
            }
            missing = [
                breaker for breaker in found.values() if breaker is not None and breaker is not _JOINED
            ]
            joined = [name for name, breaker in found.items() if breaker is _JOINED]
            if joined:
                warnings.append(_joined_after_window(model, window, joined))
            if missing:
                order = window.args.get("order") or exp.Order(expressions=[])
                order.set("expressions", [*order.expressions, *(exp.Ordered(this=e) for e in missing)])
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


def _joined_after_window(model: Model, window: exp.Window, names: list[str]) -> StrataWarning:
    listed = ", ".join(f"`{name}`" for name in names)
    return StrataWarning(
        W_NONDETERMINISTIC_WINDOW,
        f"model `{model.name}`: `order_by` column(s) {listed} come from a relation joined after "
        f"`{window.sql(dialect='duckdb')}` is computed, so they cannot break its ties; tied rows may "
        "be ordered arbitrarily",
        model.location,
        hint="name in `order_by` columns that exist where the window is computed, or compute the "
        "window after the join",
    )


# Functions whose result depends on the clock, a random generator or a sequence, not on the rows.
VOLATILE = tuple(
    getattr(exp, name)
    for name in (
        "CurrentDate",
        "CurrentTime",
        "CurrentTimestamp",
        "CurrentDatetime",
        "CurrentTimestampLTZ",
        "Localtime",
        "Localtimestamp",
        "Rand",
        "Randn",
        "Uuid",
    )
    if hasattr(exp, name)
)
VOLATILE_NAMES = {
    "now",
    "today",
    "get_current_timestamp",
    "get_current_time",
    "transaction_timestamp",
    "statement_timestamp",
    "current_localtime",
    "current_localtimestamp",
    "random",
    "uuid",
    "uuidv4",
    "uuidv7",
    "gen_random_uuid",
    "nextval",
    "currval",
    "setseed",
}
# How the volatile functions may be spelled in a module, to point at the call itself.
_SPELLINGS = re.compile(
    r"\b("
    + "|".join(
        sorted(
            VOLATILE_NAMES
            | {"current_date", "current_time", "current_timestamp", "localtime", "localtimestamp", "rand"},
            key=len,
            reverse=True,
        )
    )
    + r")\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class VolatileCall:
    """A call of a volatile function in a model, as DuckDB SQL, and where it is written."""

    sql: str
    location: Location


def _is_volatile(node: exp.Expr) -> bool:
    if isinstance(node, VOLATILE):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in VOLATILE_NAMES


def step_expressions(model: Model) -> Iterator[Expr]:
    """Every expression the model's steps write, in step order."""
    for step in model.steps:
        if isinstance(step, JoinStep) and step.on is not None:
            yield step.on
        elif isinstance(step, FilterStep):
            yield step.condition
        elif isinstance(step, LetStep):
            yield step.assignment.expr
        elif isinstance(step, (DeriveStep, AggregateStep)):
            yield from (assignment.expr for assignment in step.assignments)
        elif isinstance(step, GroupStep):
            yield from step.keys
        elif isinstance(step, SelectStep):
            yield from step.items
        elif isinstance(step, ExpandStep):
            yield step.item


def _call_location(expr: Expr, occurrence: int) -> Location:
    """The position of the `occurrence`-th volatile spelling in the expression's text (the
    expression's own position when the text spells it otherwise)."""
    matches = list(_SPELLINGS.finditer(expr.text))
    if occurrence >= len(matches):
        return expr.location
    offset = matches[occurrence].start()
    before = expr.text[:offset]
    if "\n" not in before:
        return Location(expr.location.file, expr.location.line, expr.location.column + offset)
    return Location(expr.location.file, expr.location.line + before.count("\n"), offset - before.rfind("\n"))


def volatile_calls(model: Model) -> tuple[VolatileCall, ...]:
    """Every volatile function call in the model's pipeline, in the order written."""
    calls: list[VolatileCall] = []
    for expr in step_expressions(model):
        found = [node for node in expr.node.walk(bfs=False) if _is_volatile(node)]
        for occurrence, node in enumerate(found):
            calls.append(VolatileCall(node.sql(dialect="duckdb"), _call_location(expr, occurrence)))
    return tuple(calls)


def effective_refresh(model: Model) -> Refresh | None:
    """How often the model is rebuilt regardless of its inputs: its `refresh:`, else `always` when
    it calls a volatile function, else never (None: reused while its inputs and code are unchanged)."""
    declared = model.properties.refresh
    if declared is not None:
        return declared
    return "always" if volatile_calls(model) else None


def volatile_warnings(model: Model) -> list[StrataWarning]:
    """W002 for a model that calls a volatile function and does not declare `refresh:`."""
    calls = volatile_calls(model)
    if not calls or model.properties.refresh is not None:
        return []
    first = calls[0]
    return [
        StrataWarning(
            W_VOLATILE,
            f"model `{model.name}` calls `{first.sql}`: its rows depend on when it runs, so it is rebuilt "
            "on every run, never reused",
            first.location,
            hint="declare `refresh: daily` or `refresh: hourly` to reuse its build within that UTC period, or "
            "`refresh: always` to keep rebuilding it on every run without this warning",
        )
    ]
