"""Spark rewrite rules for aggregates, windows and set operations (see rules for the driver).

An aggregate rewritten into an expression around Spark's own aggregate keeps its FILTER (WHERE)
and OVER (...) on that inner aggregate call, where Spark's grammar wants them.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from strata_dagster.backends.spark.dialect.support import call, is_kind, known_type, lambda_of, refuse

_TEMPORAL = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.TIME,
    exp.DataType.Type.INTERVAL,
)
# Window functions Spark only computes over an ordered window.
_NEEDS_ORDER = (
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
    exp.PercentRank,
    exp.CumeDist,
    exp.Ntile,
    exp.Lag,
    exp.Lead,
)


def _clauses(node: exp.Expr) -> tuple[exp.Expr, exp.Filter | None, exp.Window | None]:
    """The outermost node of an aggregate call with its FILTER and OVER, and those two clauses."""
    outer: exp.Expr = node
    clause = None
    if isinstance(node.parent, exp.Filter) and node.parent.this is node:
        clause = node.parent
        outer = clause
    window = None
    if isinstance(outer.parent, exp.Window) and outer.parent.this is outer:
        window = outer.parent
        outer = window
    return outer, clause, window


def _with_clauses(aggregate: exp.Expr, clause: exp.Filter | None, window: exp.Window | None) -> exp.Expr:
    result = aggregate
    if clause is not None:
        result = exp.Filter(this=result, expression=clause.expression.copy())
    if window is not None:
        over = window.copy()
        over.set("this", result)
        result = over
    return result


def _replace_call(node: exp.Expr, build: Callable[[Callable[[exp.Expr], exp.Expr]], exp.Expr]) -> None:
    """Replace the aggregate `node` (with its clauses) by `build(wrap)`, where `wrap(aggregate)` puts
    the clauses back on each inner aggregate call."""
    outer, clause, window = _clauses(node)
    replacement = build(lambda aggregate: _with_clauses(aggregate, clause, window))
    replacement.type = outer.type or node.type
    outer.replace(replacement)


def _list(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's list/array_agg keeps NULL elements, honours its ORDER BY and is NULL over no rows;
    Spark's collect_list drops NULLs and any order, and gives []."""
    value = node.this
    order: list[exp.Ordered] = []
    is_distinct = False
    if isinstance(value, exp.Order):
        order = list(value.expressions)
        value = value.this
    if isinstance(value, exp.Distinct):
        if order or len(value.expressions) != 1:
            raise refuse(
                "list(DISTINCT x ORDER BY ...)",
                "only one of DISTINCT and ORDER BY is rewritten",
                "order the distinct values in a later step with list_sort",
                node,
            )
        is_distinct = True
        value = value.expressions[0]
    fields = [exp.alias_(value.copy(), "v")]
    fields.extend(exp.alias_(item.this.copy(), f"k{index}") for index, item in enumerate(order))

    def build(wrap: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
        collected = wrap(call("COLLECT_LIST", exp.Struct(expressions=fields)))
        if order:
            collected = call("ARRAY_SORT", collected, _comparator(order))
        values: exp.Expr = call("TRANSFORM", collected, lambda_of("__e", exp.column("v", table="__e")))
        if is_distinct:
            values = call("ARRAY_DISTINCT", values)
        is_empty = exp.EQ(
            this=call("SIZE", wrap(call("COLLECT_LIST", exp.Struct(expressions=[f.copy() for f in fields])))),
            expression=exp.Literal.number(0),
        )
        return exp.If(this=is_empty, true=exp.Null(), false=values)

    _replace_call(node, build)
    return None


def _comparator(order: list[exp.Ordered]) -> exp.Lambda:
    """(l, r) -> -1 | 0 | 1 ordering struct elements by their k0, k1, ... fields as DuckDB's ORDER
    BY does: NULLs last unless NULLS FIRST, for ASC and DESC alike."""
    result: exp.Expr = exp.Literal.number(0)
    for index in reversed(range(len(order))):
        item = order[index]
        is_desc = bool(item.args.get("desc"))
        is_nulls_first = bool(item.args.get("nulls_first"))
        left, right = exp.column(f"k{index}", table="l"), exp.column(f"k{index}", table="r")
        before, after = exp.Literal.number(-1), exp.Literal.number(1)
        result = exp.Case(
            ifs=[
                exp.If(
                    this=exp.and_(
                        exp.Is(this=left.copy(), expression=exp.Null()),
                        exp.Is(this=right.copy(), expression=exp.Null()),
                    ),
                    true=result,
                ),
                exp.If(
                    this=exp.Is(this=left.copy(), expression=exp.Null()),
                    true=(before if is_nulls_first else after).copy(),
                ),
                exp.If(
                    this=exp.Is(this=right.copy(), expression=exp.Null()),
                    true=(after if is_nulls_first else before).copy(),
                ),
                exp.If(
                    this=exp.LT(this=left.copy(), expression=right.copy()),
                    true=(after if is_desc else before).copy(),
                ),
                exp.If(
                    this=exp.GT(this=left.copy(), expression=right.copy()),
                    true=(before if is_desc else after).copy(),
                ),
            ],
            default=result.copy(),
        )
    return exp.Lambda(this=result, expressions=[exp.to_identifier("l"), exp.to_identifier("r")])


def _typed_like_input(result: exp.Expr, value: exp.Expr, quantiles: exp.Expr) -> exp.Expr:
    """Spark's percentiles are DOUBLE; DuckDB's keep a DECIMAL input's type."""
    kind = known_type(value)
    if kind is None or not kind.is_type(exp.DataType.Type.DECIMAL):
        return result
    target = (
        exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[kind.copy()], nested=True)
        if isinstance(quantiles, exp.Array)
        else kind.copy()
    )
    return exp.Cast(this=result, to=target)


def _refuse_temporal(value: exp.Expr, name: str, node: exp.Expr) -> None:
    if is_kind(value, *_TEMPORAL):
        raise refuse(
            f"{name} of a date, timestamp or interval",
            "Spark's percentiles are numeric only",
            "take the percentile of epoch(...) and convert back with to_timestamp",
            node,
        )


def _quantile_cont(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's quantile_cont(x, q) and median(x) interpolate, as Spark's percentile does."""
    value = node.this
    quantiles = exp.Literal.number(0.5) if isinstance(node, exp.Median) else node.expression
    _refuse_temporal(value, "quantile_cont/median", node)
    _replace_call(
        node,
        lambda wrap: _typed_like_input(
            wrap(call("PERCENTILE", value.copy(), quantiles.copy())), value, quantiles
        ),
    )
    return None


def _quantile_disc(node: exp.Expr) -> exp.Expr | None:
    value = node.this
    quantiles = node.args.get("quantile") if isinstance(node, exp.Quantile) else node.expression
    _refuse_temporal(value, "quantile_disc", node)
    if isinstance(quantiles, exp.Array):
        raise refuse(
            "quantile_disc with a list of quantiles",
            "Spark's percentile_disc takes one",
            "compute one aggregate per quantile",
            node,
        )
    assert quantiles is not None  # sqlglot parses quantile_disc with its quantile

    def build(wrap: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
        ordered = exp.Order(expressions=[exp.Ordered(this=value.copy(), nulls_first=False)])
        within = exp.WithinGroup(this=call("PERCENTILE_DISC", quantiles.copy()), expression=ordered)
        kind = known_type(value)
        result = wrap(within)
        return exp.Cast(this=result, to=kind.copy()) if kind is not None else result

    _replace_call(node, build)
    return None


def _average(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's avg of a DECIMAL is a DOUBLE (the exact sum over the count); Spark's a DECIMAL."""
    value = node.this
    if not is_kind(value, exp.DataType.Type.DECIMAL):
        return None
    _replace_call(
        node,
        lambda wrap: call(
            "TRY_DIVIDE",
            exp.cast(wrap(exp.Sum(this=value.copy())), "DOUBLE"),
            wrap(exp.Count(this=value.copy())),
        ),
    )
    return None


def _sum(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's sum of a DECIMAL(p, s) is a DECIMAL(38, s); Spark's a DECIMAL(p + 10, s): the same
    value, another type (which a contract, or a schema comparison, would see)."""
    value = node.this
    kind = known_type(value)
    if kind is None or not kind.is_type(exp.DataType.Type.DECIMAL):
        return None
    params = kind.expressions
    scale = params[1].copy() if len(params) > 1 else exp.DataTypeParam(this=exp.Literal.number(0))
    target = exp.DataType(
        this=exp.DataType.Type.DECIMAL, expressions=[exp.DataTypeParam(this=exp.Literal.number(38)), scale]
    )
    _replace_call(node, lambda wrap: exp.Cast(this=wrap(exp.Sum(this=value.copy())), to=target))
    return None


def _arg_extreme(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's arg_max(a, b) skips rows whose `a` is NULL; Spark's max_by does not."""
    value, by = node.this, node.expression
    node.set(
        "expression",
        exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null(), false=by),
    )
    return None


def _window(node: exp.Expr) -> exp.Expr | None:
    function = node.this
    if function is not None and function.find(exp.Distinct) is not None:
        raise refuse(
            "an aggregate(DISTINCT ...) OVER (...)",
            "Spark computes no DISTINCT aggregate as a window function",
            "group the distinct values in a model and join it back",
            node,
        )
    order = node.args.get("order")
    if isinstance(function, _NEEDS_ORDER) and (order is None or not order.expressions):
        # DuckDB numbers the rows of an unordered window in no particular order; Spark needs an
        # ORDER BY, and a constant one leaves the order as undetermined as DuckDB's.
        node.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Null())]))
    return None


def _union(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's UNION [ALL] BY NAME matches columns by name (case-insensitively) and fills the
    columns one side lacks with NULL; Spark's SQL has no BY NAME."""
    if not node.args.get("by_name"):
        return None
    left, right = node.this, node.expression
    left_names, right_names = list(left.named_selects), list(right.named_selects)
    names = left_names + [name for name in right_names if name.lower() not in {n.lower() for n in left_names}]

    def side(query: exp.Query, available: list[str], alias: str) -> exp.Select:
        by_lower = {name.lower(): name for name in available}
        items = [
            exp.alias_(exp.column(by_lower[name.lower()], table=alias, quoted=True), name, quoted=True)
            if name.lower() in by_lower
            else exp.alias_(exp.Null(), name, quoted=True)
            for name in names
        ]
        return exp.select(*items).from_(query.subquery(alias))

    combined = exp.Union(
        this=side(left, left_names, "__l"),
        expression=side(right, right_names, "__r"),
        distinct=node.args.get("distinct"),
    )
    for key in ("with_", "order", "limit", "offset"):
        if node.args.get(key) is not None:
            combined.set(key, node.args[key])
    return combined


AGGREGATE_RULES: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr | None]] = {
    exp.ArrayAgg: _list,
    exp.PercentileCont: _quantile_cont,
    exp.Median: _quantile_cont,
    exp.PercentileDisc: _quantile_disc,
    exp.Quantile: _quantile_disc,
    exp.Avg: _average,
    exp.Sum: _sum,
    exp.ArgMax: _arg_extreme,
    exp.ArgMin: _arg_extreme,
    exp.Window: _window,
    exp.Union: _union,
}
