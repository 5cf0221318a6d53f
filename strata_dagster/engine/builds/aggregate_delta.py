"""Partitioned aggregates maintained from their input's delta, equal to a recomputation.

A model `from M [join ...] [let / filter / derive] group K aggregate ...`, partitioned by one of its
group keys, follows M's new segments (engine.builds.model_slices): what changed in M is the rows the new
segments take away (R: the earlier rows whose keys they replace) and add (A). The pipeline up to the
grouping is row-wise and its other inputs did not change, so the rows the grouping reads now are
those it read before, less the pipeline's rows of R, plus those of A. Per group, then:

- `count(*)` and `count(x)`: the old value, less R's, plus A's;
- `sum(x)` of integers or decimals (exact arithmetic): the same, NULL while no value is non-NULL;
- `count(distinct x)`: the old value, plus the values A brings that the group did not hold, less
  those R took that it no longer holds, told by counting only those (group, value) pairs in the
  input now;
- `min(x)` / `max(x)`: the extreme of the old value and A's, when R took no value at or past it
  or A brings one at or past it (an update that keeps the extreme, or moves it on).

A group the delta leaves undecided (with no `count(*)`, one that lost rows and gained none may be
gone; a sum whose non-NULL values may all be gone; a min or max whose value R may have taken) has
its partition recomputed completely from the input, as every affected partition was before. Any
other aggregate (avg, a float sum, an aggregate inside an expression, a FILTER clause) keeps the
partition-complete recomputation for the whole model. Either way the rows are those a
recomputation gives: the partition build writes them as the new segment replacing the affected
partitions, and measures and checks them as before (engine.builds.partitions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.partition_types import INTEGER_TYPES
from strata_dagster.compile.relations import bind
from strata_dagster.language.definition import (
    AggregateStep,
    DeriveStep,
    FilterStep,
    FromStep,
    GroupStep,
    JoinStep,
    LetStep,
    Model,
)
from strata_dagster.sql.render import data_type
from strata_dagster.sql.segments import union_all

COUNT_STAR, COUNT, SUM, COUNT_DISTINCT, MIN, MAX = (
    "count_star",
    "count",
    "sum",
    "count_distinct",
    "min",
    "max",
)
WEIGHT = "__w"  # +1: a row the new segments add; -1: a row they take away
OLD, DELTA = "__old", "__delta"  # the old rows of the affected partitions; the delta's figures per group
PAIR, COUNTED, NOW = "__pair", "__counted", "__now"
VALUE = "__v"
# Types whose sums add and subtract exactly (a float sum depends on the order of its terms).
EXACT_SUM_TYPES = (*INTEGER_TYPES, "UHUGEINT", "DECIMAL")
_EXTREMES = {MIN: "min", MAX: "max"}
# Detail key of a build whose partitions the input's delta maintained: how many groups it touched,
# and the affected partitions it left undecided (recomputed from the input).
MAINTAINED = "aggregate_delta"


@dataclass(frozen=True)
class Aggregate:
    name: str  # its output column
    kind: str
    argument: exp.Expr | None  # None for count(*)

    @property
    def column(self) -> str:
        """The argument's column in the rows before the grouping."""
        return f"__arg_{self.name}"


@dataclass(frozen=True)
class AggregateShape:
    keys: tuple[tuple[str, exp.Expr], ...]  # output name, the expression grouped by
    aggregates: tuple[Aggregate, ...]

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.keys)

    @property
    def names(self) -> tuple[str, ...]:
        return self.key_names + tuple(item.name for item in self.aggregates)

    @property
    def count_star(self) -> Aggregate | None:
        return next((item for item in self.aggregates if item.kind == COUNT_STAR), None)

    @property
    def distinct(self) -> tuple[Aggregate, ...]:
        return tuple(item for item in self.aggregates if item.kind == COUNT_DISTINCT)


def _aggregate_of(name: str, node: exp.Expr) -> Aggregate | None:
    """One aggregate of one argument, as the delta maintains it (None: it cannot)."""
    if isinstance(node, exp.Count):
        argument = node.this
        if argument is None or node.expressions:
            return None
        if isinstance(argument, exp.Star):
            return Aggregate(name, COUNT_STAR, None)
        if isinstance(argument, exp.Distinct):
            values = argument.expressions
            return Aggregate(name, COUNT_DISTINCT, values[0]) if len(values) == 1 else None
        return Aggregate(name, COUNT, argument)
    kinds: dict[type[exp.Expr], str] = {exp.Sum: SUM, exp.Min: MIN, exp.Max: MAX}
    kind = kinds.get(type(node))
    if kind is None or node.this is None or isinstance(node.this, exp.Distinct):
        return None
    if any(value for key, value in node.args.items() if key != "this"):
        return None  # min(x, n) and the like
    return Aggregate(name, kind, node.this)


def shape_of(model: Model, compiled: CompiledModel) -> AggregateShape | str:
    """A model's group keys and aggregates when its delta can maintain them, else why not."""
    steps = list(model.steps)
    if len(steps) < 3 or not isinstance(steps[-2], GroupStep) or not isinstance(steps[-1], AggregateStep):
        return "its pipeline does not end with `group` and `aggregate`"
    for step in steps[1:-2]:
        if isinstance(step, JoinStep) and step.kind not in ("inner", "left"):
            return f"a {step.kind} join brings rows that no `from` row gives"
        if not isinstance(step, (FromStep, JoinStep, FilterStep, LetStep, DeriveStep)):
            return "a step before the grouping is not row-wise"
    statement = compiled.statement
    group = statement.args.get("group")
    if compiled.has_window or group is None or statement.args.get("having") is not None:
        return "its statement is not one grouping"
    grouped = list(group.expressions)
    projection = list(statement.expressions)
    columns = compiled.columns or ()
    if len(projection) != len(columns) or len(grouped) + len(steps[-1].assignments) != len(projection):
        return "its output is not its group keys and its aggregates"
    keys = tuple((name, node.copy()) for name, node in zip(columns, grouped, strict=False))
    aggregates = []
    for name, node in zip(columns[len(grouped) :], projection[len(grouped) :], strict=True):
        item = _aggregate_of(name, node.unalias() if isinstance(node, exp.Alias) else node)
        if item is None:
            return f"`{name}` is not count, sum, count(distinct), min or max of one expression"
        aggregates.append(item)
    return AggregateShape(keys, tuple(aggregates))


def exactness_problem(shape: AggregateShape, columns: Sequence[Sequence[str]]) -> str | None:
    """Why the previous state's columns do not let the delta decide every value, if they do not."""
    types = {name: type_name for name, type_name in columns}
    if tuple(types) != shape.names:
        return "the previous state's columns are not the model's"
    for item in shape.aggregates:
        if item.kind == SUM and not types[item.name].upper().startswith(EXACT_SUM_TYPES):
            return f"`{item.name}` sums {types[item.name]} values, which do not add up exactly"
    return None


def traced_argument(
    compiled: CompiledModel, item: Aggregate, joined: Sequence[tuple[JoinStep, Sequence[str]]]
) -> exp.Expr | None:
    """A count(distinct)'s argument as an expression over the raw `from` row, when it is a column
    of the base scope (never a joined relation's): what narrows the input to the values the delta
    touched. `joined`: each join and its relation's columns."""
    argument = item.argument
    base_columns = compiled.base_columns
    if not isinstance(argument, exp.Column) or base_columns is None or argument.name not in base_columns:
        return None
    if argument.table and argument.table != compiled.base_relation:
        return None
    if not argument.table:
        for step, columns in joined:
            if argument.name in columns and argument.name not in step.using:
                return None
    return compiled.base_expression(argument.name)


# -- the rows the grouping reads ------------------------------------------------------------------
def rows_before_grouping(
    compiled: CompiledModel,
    shape: AggregateShape,
    relation: Callable[[str], exp.Table | exp.Query],
    base_predicate: exp.Expr | None = None,
) -> exp.Select:
    """The pipeline's rows just before the grouping: each group key under its output name and each
    aggregate's argument under `Aggregate.column`, reading the inputs `relation` gives."""
    statement = (
        compiled.with_base_predicate(base_predicate) if base_predicate is not None else compiled.statement
    )
    query = statement.copy()
    query.set("group", None)
    projection: list[exp.Expr] = [exp.alias_(node.copy(), name) for name, node in shape.keys]
    projection += [
        exp.alias_(item.argument.copy(), item.column)
        for item in shape.aggregates
        if item.argument is not None
    ]
    query.set("expressions", projection)
    return bind(query, relation, copy=False)  # type: ignore[return-value]  # bind keeps the root: a query


def changed_rows(
    compiled: CompiledModel,
    shape: AggregateShape,
    relation: Callable[[str], exp.Table | exp.Query],
    removed: exp.Table | exp.Query | None,
    added: exp.Table | exp.Query | None,
) -> exp.Query:
    """The rows the grouping reads that the input's delta takes away (weight -1) and adds (+1)."""
    base = compiled.base_relation
    parts = []
    for rows, weight in ((removed, -1), (added, 1)):
        if rows is None:
            continue

        def resolve(name: str, rows: exp.Table | exp.Query = rows) -> exp.Table | exp.Query:
            return rows if name == base else relation(name)

        grouped = rows_before_grouping(compiled, shape, resolve).subquery("__rows")
        parts.append(exp.select("*", exp.alias_(exp.Literal.number(weight), WEIGHT)).from_(grouped))
    if not parts:
        grouped = rows_before_grouping(compiled, shape, relation).subquery("__rows")
        return exp.select("*", exp.alias_(exp.Literal.number(1), WEIGHT)).from_(grouped).where(exp.false())
    return union_all(parts)


def _side(weight: int, value: exp.Expr) -> exp.Expr:
    """`value` on the rows of one side of the delta, NULL on the other's."""
    is_side = exp.EQ(this=exp.column(WEIGHT), expression=exp.Literal.number(weight))
    return exp.Case(ifs=[exp.If(this=is_side, true=value)])


def delta_figures(shape: AggregateShape, changes: exp.Query) -> exp.Select:
    """Per group the delta touches: its rows and each aggregate's figures on each side (a: added,
    r: taken away)."""
    figures: list[exp.Expr] = [
        exp.alias_(exp.func("count", _side(sign, exp.Literal.number(1))), f"__rows_{side}")
        for sign, side in ((1, "a"), (-1, "r"))
    ]
    for item in shape.aggregates:
        if item.argument is None or item.kind == COUNT_DISTINCT:
            continue
        argument = exp.column(item.column)
        for sign, side in ((1, "a"), (-1, "r")):
            values = exp.func("count", _side(sign, argument.copy()))
            figures.append(exp.alias_(values, f"__nn_{side}_{item.name}"))
            if item.kind != COUNT:
                function = _EXTREMES.get(item.kind, "sum")
                figures.append(
                    exp.alias_(exp.func(function, _side(sign, argument.copy())), f"__{side}_{item.name}")
                )
    keys = [exp.column(name) for name in shape.key_names]
    return (
        exp.select(*keys, *figures)
        .from_(changes.subquery("__changes"))
        .group_by(*(key.copy() for key in keys))
    )


def distinct_pairs(shape: AggregateShape, item: Aggregate, changes: exp.Query) -> exp.Select:
    """The (group, value) pairs of a count(distinct) that the delta touches, each with the rows it
    adds less those it takes away: the pair's rows before are its rows now less that."""
    keys = [exp.column(name) for name in shape.key_names]
    value = exp.column(item.column)
    return (
        exp.select(
            *keys, exp.alias_(value.copy(), VALUE), exp.alias_(exp.func("sum", exp.column(WEIGHT)), "__dw")
        )
        .from_(changes.subquery("__changes"))
        .where(exp.not_(_is_null(value.copy())))
        .group_by(*(key.copy() for key in keys), value.copy())
    )


def _keys_match(shape: AggregateShape, left: str, right: str) -> exp.Expr:
    return exp.and_(
        *(
            exp.NullSafeEQ(this=exp.column(name, table=left), expression=exp.column(name, table=right))
            for name in shape.key_names
        )
    )


def _pair_match(shape: AggregateShape, left: str, right: str, right_value: str) -> exp.Expr:
    same_value = exp.EQ(this=exp.column(VALUE, table=left), expression=exp.column(right_value, table=right))
    return exp.and_(_keys_match(shape, left, right), same_value)


def distinct_change(
    shape: AggregateShape, item: Aggregate, pairs: exp.Table, rows_now: exp.Select
) -> exp.Select:
    """Per group, the values its count(distinct) gains (a pair with rows now and none before) less
    those it loses (rows before, none now). `rows_now`: the rows the grouping reads now, narrowed
    to a superset of the pairs' rows."""
    touched = exp.Exists(
        this=exp.select(exp.Literal.number(1))
        .from_(pairs.copy().as_(PAIR))
        .where(_pair_match(shape, PAIR, NOW, item.column))
    )
    keys = [exp.column(name, table=NOW) for name in shape.key_names]
    value = exp.column(item.column, table=NOW)
    counted = (
        exp.select(*keys, exp.alias_(value.copy(), VALUE), exp.alias_(exp.func("count", exp.Star()), "__n"))
        .from_(rows_now.subquery(NOW))
        .where(exp.and_(exp.not_(_is_null(value.copy())), touched))
        .group_by(*(key.copy() for key in keys), value.copy())
    )
    zero = exp.Literal.number(0)
    now = exp.func("coalesce", exp.column("__n", table=COUNTED), zero.copy())
    before = exp.Sub(this=now.copy(), expression=exp.column("__dw", table=PAIR))
    gained = exp.and_(
        exp.GT(this=now.copy(), expression=zero.copy()), exp.EQ(this=before.copy(), expression=zero.copy())
    )
    lost = exp.and_(
        exp.EQ(this=now.copy(), expression=zero.copy()), exp.GT(this=before, expression=zero.copy())
    )
    change = exp.Case(
        ifs=[exp.If(this=gained, true=exp.Literal.number(1)), exp.If(this=lost, true=exp.Literal.number(-1))],
        default=zero.copy(),
    )
    pair_keys = [exp.column(name, table=PAIR) for name in shape.key_names]
    return (
        exp.select(*pair_keys, exp.alias_(exp.func("sum", change), "__dd"))
        .from_(pairs.copy().as_(PAIR))
        .join(counted.subquery(COUNTED), on=_pair_match(shape, PAIR, COUNTED, VALUE), join_type="left")
        .group_by(*(key.copy() for key in pair_keys))
    )


# -- the new rows ---------------------------------------------------------------------------------
def _figure(name: str) -> exp.Column:
    return exp.column(name, table=DELTA)


def _zero_if_null(value: exp.Expr) -> exp.Expr:
    return exp.func("coalesce", value, exp.Literal.number(0))


def _is_null(value: exp.Expr) -> exp.Expr:
    return exp.Is(this=value, expression=exp.null())


def _is_zero(value: exp.Expr) -> exp.Expr:
    return exp.EQ(this=value, expression=exp.Literal.number(0))


def _is_positive(value: exp.Expr) -> exp.Expr:
    return exp.GT(this=value, expression=exp.Literal.number(0))


def group_key(shape: AggregateShape, name: str) -> exp.Expr:
    """A group key of a row of the old rows FULL JOIN the delta's figures."""
    return exp.func("coalesce", exp.column(name, table=OLD), _figure(name))


def old_and_delta(old_rows: exp.Table | exp.Query, delta: exp.Table, shape: AggregateShape) -> exp.Select:
    """FROM the old rows FULL JOIN the delta's figures, by group (NULL-safe)."""
    old = old_rows.subquery(OLD) if isinstance(old_rows, exp.Query) else old_rows.copy().as_(OLD)
    return (
        exp.select()
        .from_(old)
        .join(delta.copy().as_(DELTA), on=_keys_match(shape, OLD, DELTA), join_type="full")
    )


def undecided(shape: AggregateShape) -> exp.Expr:
    """Over the old rows FULL JOIN the delta's figures: a group whose new row the delta does not
    decide (its partition is recomputed instead)."""
    lost_rows = _is_positive(_zero_if_null(_figure("__rows_r")))
    conditions: list[exp.Expr] = []
    if shape.count_star is None:
        # With no count(*), a group that lost rows and gained none may have lost its last one.
        conditions.append(exp.and_(lost_rows, _is_zero(_zero_if_null(_figure("__rows_a")))))
    for item in shape.aggregates:
        old = exp.column(item.name, table=OLD)
        lost_values = _is_positive(_zero_if_null(_figure(f"__nn_r_{item.name}")))
        if item.kind == SUM:
            # Its non-NULL values may all be gone exactly when what is left of them sums to 0.
            left = exp.Sub(this=old.copy(), expression=_zero_if_null(_figure(f"__r_{item.name}")))
            conditions.append(
                exp.and_(
                    exp.not_(_is_null(old.copy())),
                    lost_values,
                    _is_zero(_zero_if_null(_figure(f"__nn_a_{item.name}"))),
                    _is_zero(left),
                )
            )
        elif item.kind in _EXTREMES:
            # Decided when R took no value at or past the extreme (it stays, or A's passes it), or
            # when A brings one at or past it (A's is the new extreme).
            past, reaching = (exp.GT, exp.LTE) if item.kind == MIN else (exp.LT, exp.GTE)
            kept = past(this=_figure(f"__r_{item.name}"), expression=old.copy())
            passed = reaching(this=_figure(f"__a_{item.name}"), expression=old.copy())
            decided = exp.func("coalesce", exp.or_(kept, passed), exp.false())
            conditions.append(exp.and_(exp.not_(_is_null(old.copy())), lost_values, exp.not_(decided)))
    return exp.or_(*conditions) if conditions else exp.false()


def _new_value(item: Aggregate) -> exp.Expr:
    old = exp.column(item.name, table=OLD)
    if item.kind in (COUNT_STAR, COUNT):
        added_name, taken_name = (
            ("__rows_a", "__rows_r")
            if item.kind == COUNT_STAR
            else (f"__nn_a_{item.name}", f"__nn_r_{item.name}")
        )
        return exp.Sub(
            this=exp.Add(this=_zero_if_null(old), expression=_zero_if_null(_figure(added_name))),
            expression=_zero_if_null(_figure(taken_name)),
        )
    if item.kind == COUNT_DISTINCT:
        return exp.Add(
            this=_zero_if_null(old), expression=_zero_if_null(exp.column("__dd", table=f"__dd_{item.name}"))
        )
    added = _figure(f"__a_{item.name}")
    if item.kind == SUM:
        # No non-NULL value before (or no group): the added values' sum, NULL when there is none.
        kept = exp.Add(
            this=exp.Sub(this=old.copy(), expression=_zero_if_null(_figure(f"__r_{item.name}"))),
            expression=_zero_if_null(added.copy()),
        )
        return exp.Case(ifs=[exp.If(this=_is_null(old.copy()), true=added)], default=kept)
    extreme = "least" if item.kind == MIN else "greatest"
    return exp.Case(
        ifs=[
            exp.If(this=_is_null(old.copy()), true=added.copy()),
            exp.If(this=_is_null(added.copy()), true=old.copy()),
        ],
        default=exp.func(extreme, old.copy(), added.copy()),
    )


def maintained_rows(
    shape: AggregateShape,
    columns: Sequence[Sequence[str]],
    old_rows: exp.Table | exp.Query,
    delta: exp.Table,
    distinct: dict[str, exp.Query],
    is_written: exp.Expr,
) -> exp.Select:
    """The new rows of the groups of the partitions written from the delta: their old rows
    (`old_rows`) FULL JOIN the delta's figures per group (`delta`), with each count(distinct)'s
    change per group (`distinct`, by output name), in the previous state's columns and types.
    `is_written`: over that join, whether a group's partition is written from the delta."""
    items = {item.name: item for item in shape.aggregates}
    projection = []
    for name, type_name in columns:
        value = _new_value(items[name]) if name in items else group_key(shape, name)
        projection.append(exp.alias_(exp.cast(value, data_type(type_name)), name))
    query = old_and_delta(old_rows, delta, shape).select(*projection, copy=False)
    for name, change in distinct.items():
        alias = f"__dd_{name}"
        joined = exp.and_(
            *(
                exp.NullSafeEQ(this=exp.column(key, table=alias), expression=group_key(shape, key))
                for key in shape.key_names
            )
        )
        query = query.join(change.subquery(alias), on=joined, join_type="left", copy=False)
    count_star = shape.count_star
    if count_star is not None:
        lives = _is_positive(_new_value(count_star))
    else:
        # An undecided group's partition is recomputed instead; a decided one lives on when it
        # gained rows or lost none.
        lives = exp.or_(
            _is_positive(_zero_if_null(_figure("__rows_a"))), _is_zero(_zero_if_null(_figure("__rows_r")))
        )
    return query.where(exp.and_(lives, is_written), copy=False)
