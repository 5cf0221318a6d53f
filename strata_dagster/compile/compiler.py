"""Compile one model's pipeline into one DuckDB statement, built as a sqlglot AST.

Shape: a base CTE (`from` + `let` + the filters that only read base columns, in its WHERE), then
the outer steps in order. A step that cannot share a SELECT with the ones before it (a filter on a
computed column, a select after an aggregate, ...) closes the current stage into a CTE and opens a
new one on top of it, so every step keeps the meaning it has when read top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from strata_dagster.compile.relations import bind, role_relation
from strata_dagster.compile.scope import (
    Columns,
    Scope,
    check_expression,
    has_window,
    referenced_names,
    unknown_column,
)
from strata_dagster.errors import (
    E_DUPLICATE_COLUMN,
    E_PIPELINE,
    E_SET_OPERATION,
    E_UNNAMED_COLUMN,
    Location,
    StrataError,
)
from strata_dagster.language.definition import (
    HISTORY_COLUMNS,
    AggregateStep,
    Assignment,
    DeriveStep,
    ExpandStep,
    Expr,
    FilterStep,
    FromStep,
    GroupStep,
    JoinStep,
    LetStep,
    Model,
    SelectStep,
    SetOperationStep,
    Step,
)
from strata_dagster.language.expressions import DIALECT

BASE_CTE = "__base"
# Expressions that need no parentheses when substituted into another expression.
_ATOMIC = (exp.Column, exp.Literal, exp.Func, exp.Cast, exp.Paren, exp.Boolean, exp.Null)
STAGE_CTE_PREFIX = "__s"

RelationResolver = Callable[[str], exp.Table | exp.Query]
ColumnsResolver = Callable[[str], Columns]


@dataclass(frozen=True)
class JoinKeys:
    """A join and the keys that decide which rows of the joined relation a row of `from` meets."""

    relation: str
    # (base-scope column of `from`, column of the joined relation) per equality the join is made of.
    keys: tuple[tuple[str, str], ...] = ()
    # Why a row of `from` may meet rows of the joined relation with other key values (None: it cannot).
    problem: str | None = None


@dataclass(frozen=True)
class CompiledModel:
    """A model as one SQL statement, with what later layers need to know about it."""

    name: str
    statement: exp.Select  # relations named by role (`__rel__.<name>`); see bound()
    columns: Columns
    base_relation: str
    base_columns: Columns
    # True when nothing but `from`, `let` and filters shape the rows (no join, set operation,
    # expand, aggregate): a predicate on a base column can be pushed into the base CTE.
    is_base_passthrough: bool
    let_names: tuple[str, ...] = ()
    pushed_filters: int = 0
    # Output column -> the base-scope column (a source column or a let) it passes through
    # unchanged; only for base passthrough models. What incremental builds trace keys and
    # cdc columns back to, before any filter.
    lineage: tuple[tuple[str, str], ...] = ()
    lets: tuple[tuple[str, exp.Expr], ...] = field(default=(), compare=False)
    has_window: bool = False
    has_set_operation: bool = False
    joins: tuple[JoinKeys, ...] = ()
    # The base-scope columns in the PARTITION BY of every window function (each traced to a
    # column of `from` carried unchanged to where the window is computed); () when some window
    # has none, None when the model has no window. Rows with other values of these columns never
    # meet in a window, so the model can be recomputed for some of their values alone.
    window_keys: tuple[str, ...] | None = None

    def base_column(self, output: str) -> str | None:
        """The base-scope name an output column passes through unchanged, in a model that only
        filters and projects its `from` rows (what row-level incremental merges need)."""
        return self.traced_column(output) if self.is_base_passthrough else None

    def traced_column(self, output: str) -> str | None:
        """The base-scope name an output column carries unchanged through joins and group keys."""
        return dict(self.lineage).get(output)

    def base_expression(self, name: str, qualifier: str | None = None) -> exp.Expr:
        """A base-scope name as an expression over the raw source row (lets inlined)."""
        lets = dict(self.lets)
        if name in lets:
            value = lets[name].copy()
            if qualifier is not None:
                for column in value.find_all(exp.Column):
                    column.set("table", exp.to_identifier(qualifier))
            return value
        return exp.column(name, table=qualifier)

    def sql(self, relation: RelationResolver | None = None, *, pretty: bool = False) -> str:
        statement = self.bound(relation) if relation is not None else self.statement
        return statement.sql(dialect=DIALECT, pretty=pretty)

    def bound(self, relation: RelationResolver) -> exp.Select:
        """The statement reading the tables `relation` names for each source and model."""
        return bind(self.statement, relation)  # type: ignore[return-value]  # bind keeps a SELECT a SELECT

    def base(self) -> exp.Select:
        """The base CTE's query (a copy; the statement is never mutated)."""
        for cte in self.statement.args["with_"].expressions:
            if cte.alias == BASE_CTE:
                return cte.this.copy()
        raise AssertionError("compiled model without base CTE")

    def with_base_predicate(self, predicate: exp.Expr) -> exp.Select:
        """The statement with `predicate` ANDed into the base CTE's WHERE."""
        statement = self.statement.copy()
        for cte in statement.args["with_"].expressions:
            if cte.alias == BASE_CTE:
                cte.set("this", cte.this.where(predicate.copy(), copy=False))
                return statement
        raise AssertionError("compiled model without base CTE")


@dataclass
class _Stage:
    """The SELECT under construction on top of the previous stage."""

    source: exp.Expr  # what it reads: the previous CTE, aliased
    scope: Scope  # columns its expressions may read
    output: Columns  # columns it produces
    where: list[exp.Expr] = field(default_factory=list)
    joins: list[exp.Join] = field(default_factory=list)
    star_replace: list[exp.Expr] = field(default_factory=list)  # aliases
    star_except: list[exp.Column] = field(default_factory=list)
    extra: list[exp.Expr] = field(default_factory=list)  # appended after `*`
    projection: list[exp.Expr] | None = None  # explicit: replaces `*` entirely
    group_by: list[exp.Expr] | None = None
    derived: set[str] = field(default_factory=set)
    is_expanded: bool = False
    # Lets after this stage's joins: listed last (`* EXCLUDE (name), base.name`), where the
    # pipeline puts them. A step that would list columns after them, or touch them in the star,
    # opens a new stage first.
    late_lets: set[str] = field(default_factory=set)
    # A window function computed here sees the rows this stage's WHERE keeps: a later filter
    # must not join that WHERE.
    has_window: bool = False

    @property
    def is_plain(self) -> bool:
        return self.projection is None and not self.derived and not self.is_expanded

    def build(self) -> exp.Select:
        if self.projection is not None:
            items = self.projection
        else:
            star_args: dict[str, object] = {}
            if self.star_except:
                star_args["except_"] = self.star_except
            if self.star_replace:
                star_args["replace"] = self.star_replace
            items = [exp.Star(**star_args), *self.extra]
        select = exp.select(*items).from_(self.source)
        for join in self.joins:
            select = select.join(join)
        if self.where:
            select = select.where(exp.and_(*self.where))
        if self.group_by:
            select = select.group_by(*self.group_by)
        return select


class _PipelineCompiler:
    def __init__(self, model: Model, columns_of: ColumnsResolver) -> None:
        self.model = model
        self.relation = role_relation
        self.columns_of = columns_of
        self.ctes: list[tuple[str, exp.Query]] = []
        self.lets: dict[str, exp.Expr] = {}
        self.base_where: list[exp.Expr] = []
        self.stage: _Stage | None = None
        self.is_pushdown_open = True  # filters may still move into the base CTE
        self.is_base_passthrough = True
        self.lineage: dict[str, str] = {}
        self.has_window = False
        self.has_set_operation = False
        self.joins: list[JoinKeys] = []
        self.window_keys: set[str] | None = None

    # -- errors -------------------------------------------------------------------------------
    def error(self, code: str, message: str, location: Location, hint: str | None = None) -> StrataError:
        return StrataError(code, f"model `{self.model.name}`: {message}", location, hint=hint)

    # -- entry --------------------------------------------------------------------------------
    def compile(self) -> CompiledModel:
        steps = list(self.model.steps)
        if not steps or not isinstance(steps[0], FromStep):
            location = steps[0].location if steps else self.model.location
            raise self.error(
                E_PIPELINE, "a pipeline starts with `from`", location, "add `from SOURCE_OR_MODEL` first"
            )
        first = steps[0]
        self.base_alias = first.relation
        self.base_source_columns = self.columns_of(first.relation)
        if self.model.properties.merge_strategy == "history" and self.base_source_columns is not None:
            checked = self.model.properties.check_columns or ()
            if missing := [name for name in checked if name not in self.base_source_columns]:
                where = self.model.properties.location_of("check_columns")
                raise unknown_column(
                    missing[0], self.base_source_columns, self.model.name, where, relation=first.relation
                )
            added = (*HISTORY_COLUMNS, *filter(None, [self.model.properties.deleted_flag]))
            if taken := [name for name in added if name in self.base_source_columns]:
                raise self.error(
                    E_DUPLICATE_COLUMN,
                    f"`{first.relation}` has a column `{taken[0]}`, which a history model adds to its versions",
                    self.model.properties.location_of("deleted_flag") or self.model.location,
                    "name the deleted flag otherwise (`deleted_flag: was_deleted`), or rename the source's column",
                )
            self.base_source_columns = (*self.base_source_columns, *added)  # its log's versions
        self.lineage = {name: name for name in self.base_source_columns or ()}
        self._check_step_order(steps)
        index = 1
        while index < len(steps):
            step = steps[index]
            following = steps[index + 1] if index + 1 < len(steps) else None
            if isinstance(step, GroupStep) and isinstance(following, AggregateStep):
                self.is_pushdown_open = False
                self.group(step, following)
                index += 2
                continue
            self.apply(step)
            index += 1
        return self.finish()

    def _check_step_order(self, steps: list[Step]) -> None:
        shaped_by: Step | None = None
        for step in steps[1:]:
            if isinstance(step, FromStep):
                raise self.error(
                    E_PIPELINE, "a pipeline has one `from`", step.location, "read more relations with `join`"
                )
            if isinstance(step, LetStep) and shaped_by is not None:
                raise self.error(
                    E_PIPELINE,
                    f"`let {step.assignment.name}` comes after a step that reshapes rows",
                    step.location,
                    "`let` computes in the base scope, before joins reshape or steps project; use `derive` here",
                )
            if isinstance(
                step, (DeriveStep, GroupStep, AggregateStep, SelectStep, SetOperationStep, ExpandStep)
            ):
                shaped_by = step
            if isinstance(step, JoinStep) and step.relation == self.base_alias:
                raise self.error(
                    E_PIPELINE,
                    f"`{step.relation}` is joined to itself",
                    step.location,
                    "self-joins are not supported; join a model that reads the same relation",
                )

    def apply(self, step: Step) -> None:
        if not isinstance(step, (LetStep, FilterStep, JoinStep)):
            # After a step that projects or reshapes rows, a filter reads that step's output.
            self.is_pushdown_open = False
        if isinstance(step, LetStep):
            self.let(step.assignment, step.location)
        elif isinstance(step, FilterStep):
            self.filter(step)
        elif isinstance(step, JoinStep):
            self.join(step)
        elif isinstance(step, DeriveStep):
            for assignment in step.assignments:
                self.derive(assignment)
        elif isinstance(step, GroupStep):
            self.group(step, None)
        elif isinstance(step, AggregateStep):
            self.group(None, step)
        elif isinstance(step, SelectStep):
            self.select(step)
        elif isinstance(step, SetOperationStep):
            self.set_operation(step)
        elif isinstance(step, ExpandStep):
            self.expand(step)

    # -- base scope ---------------------------------------------------------------------------
    @property
    def base_columns(self) -> Columns:
        if self.base_source_columns is None:
            return None
        names = list(self.base_source_columns)
        names.extend(name for name in self.lets if name not in names)
        return tuple(names)

    def base_scope(self) -> Scope:
        return Scope(self.base_columns, {self.base_alias: self.base_columns})

    def inline_lets(self, node: exp.Expr) -> exp.Expr:
        """Replace references to earlier lets by their expressions (the base SELECT has no aliases yet)."""
        lets = self.lets

        def replace(child: exp.Expr) -> exp.Expr:
            if isinstance(child, exp.Column) and child.name in lets and child.table in ("", self.base_alias):
                value = lets[child.name].copy()
                return value if isinstance(value, _ATOMIC) else exp.paren(value, copy=False)
            return child

        return node.copy().transform(replace, copy=False)

    def let(self, assignment: Assignment, location: Location) -> None:
        check_expression(assignment.expr, self.base_scope(), model=self.model.name)
        is_window = has_window(assignment.expr.node)
        if is_window and self.stage is not None:
            # Computed in the base scan, the window would see the `from` rows alone: not what a
            # join before it keeps or adds, nor a filter that stayed above the base.
            raise self.error(
                E_PIPELINE,
                f"`let {assignment.name}` computes a window after a join or a filter on its result: "
                "a `let` is computed in the base scan, before them, so the window would not see their rows",
                location,
                f"use `derive {assignment.name} = ...`, which computes the window over the rows the steps before it give",
            )
        self.lets[assignment.name] = self.inline_lets(assignment.expr.node)
        self.lineage[assignment.name] = assignment.name
        if is_window:
            # The window sees the rows the base WHERE keeps: later filters must come after it.
            self.is_pushdown_open = False
            self.has_window = True
            self._note_windows(self.lets[assignment.name], in_base=True)
        if self.stage is not None:
            # A let after a join: the outer stage reads the base CTE, which now has one more column.
            # The stage lists it last (`* EXCLUDE (name), base.name`), where the pipeline puts it:
            # `*` alone would give it among the base columns, before the joined ones.
            stage = self.stage
            if stage.output is not None and assignment.name not in stage.output:
                stage.star_except.append(exp.column(assignment.name))
                stage.extra.append(exp.column(assignment.name, table=self.base_alias))
                stage.late_lets.add(assignment.name)
            stage.scope.columns = _extended(stage.scope.columns, assignment.name)
            stage.scope.relations[self.base_alias] = self.base_columns
            stage.output = _extended(stage.output, assignment.name)

    def filter(self, step: FilterStep) -> None:
        node = step.condition.node
        if self.is_pushdown_open and self._reads_only_base(node):
            check_expression(step.condition, self.base_scope(), model=self.model.name)
            self.base_where.append(self.inline_lets(node))
            return
        stage = self.current_stage()
        if (
            stage.projection is not None
            or stage.group_by is not None
            or stage.has_window
            or referenced_names(node) & stage.derived
        ):
            stage = self.wrap()
        check_expression(step.condition, stage.scope, model=self.model.name)
        stage.where.append(node.copy())

    def _reads_only_base(self, node: exp.Expr) -> bool:
        base = self.base_columns
        has_joins = self.stage is not None and bool(self.stage.joins)
        for column in node.find_all(exp.Column):
            if column.table:
                if column.table != self.base_alias:
                    return False
            elif base is None:
                if has_joins:
                    return False
            elif column.name not in base:
                return False
            elif (
                has_joins
                and self.stage is not None
                and (self.stage.scope.columns or ()).count(column.name) > 1
            ):
                return False  # ambiguous after the join: let the outer check report it
        return True

    # -- outer stages -------------------------------------------------------------------------
    def current_stage(self) -> _Stage:
        if self.stage is None:
            source = exp.to_table(BASE_CTE).as_(self.base_alias)
            self.stage = _Stage(source, self.base_scope(), self.base_columns)
        return self.stage

    def wrap(self) -> _Stage:
        """Close the current stage into a CTE and open a new one that reads it."""
        stage = self.current_stage()
        name = self._add_cte(stage.build())
        self.stage = _Stage(
            exp.to_table(name).as_(self.base_alias),
            Scope(stage.output, {self.base_alias: stage.output}),
            stage.output,
        )
        return self.stage

    def _add_cte(self, query: exp.Query) -> str:
        name = f"{STAGE_CTE_PREFIX}{len(self.ctes) + 1}"
        self.ctes.append((name, query))
        return name

    def join(self, step: JoinStep) -> None:
        self.is_base_passthrough = False
        stage = self.current_stage()
        if (
            not stage.is_plain
            or stage.group_by is not None
            or (stage.where and step.kind in ("right", "full"))
            or stage.late_lets  # listed last: this join's columns would come after them
        ):
            stage = self.wrap()
        right_columns = self.columns_of(step.relation)
        left_columns = stage.scope.columns
        table = self.relation(step.relation).as_(step.relation)
        if step.using:
            for name in step.using:
                for side, columns in ((self.base_alias, left_columns), (step.relation, right_columns)):
                    if columns is not None and name not in columns:
                        raise unknown_column(name, columns, self.model.name, step.location, relation=side)
            join = exp.Join(
                this=table, kind=_join_kind(step.kind), using=[exp.to_identifier(name) for name in step.using]
            )
            joined = _concat(left_columns, _without(right_columns, step.using))
        else:
            joined = _concat(left_columns, right_columns)
        stage.scope.relations[step.relation] = right_columns
        stage.scope.columns = joined
        stage.output = joined
        self.joins.append(self._join_keys(step))
        self._lineage_after_join(step, right_columns)
        if step.on is not None:
            check_expression(step.on, stage.scope, model=self.model.name)
            join = exp.Join(this=table, kind=_join_kind(step.kind), on=step.on.node.copy())
        if step.kind in ("right", "full"):
            self.is_pushdown_open = False  # a filter on the left side no longer commutes with the join
        stage.joins.append(join)

    def derive(self, assignment: Assignment) -> None:
        stage = self.current_stage()
        node = assignment.expr.node
        if (
            stage.projection is not None
            or stage.group_by is not None
            or stage.is_expanded
            or referenced_names(node) & stage.derived
            or assignment.name in stage.derived
            or assignment.name in stage.late_lets
        ):
            stage = self.wrap()
        check_expression(assignment.expr, stage.scope, model=self.model.name)
        value = exp.alias_(node.copy(), assignment.name)
        self.lineage.pop(assignment.name, None)
        if stage.output is not None and assignment.name in stage.output:
            stage.star_replace.append(value)
        else:
            stage.extra.append(value)
            stage.output = _extended(stage.output, assignment.name)
        stage.derived.add(assignment.name)
        self._note_windows(node)
        stage.has_window = stage.has_window or has_window(node)
        self.has_window = self.has_window or stage.has_window

    def group(self, keys: GroupStep | None, aggregates: AggregateStep | None) -> None:
        self.is_base_passthrough = False
        stage = self.current_stage()
        if not stage.is_plain or stage.group_by is not None:
            stage = self.wrap()
        projection: list[exp.Expr] = []
        group_by: list[exp.Expr] = []
        names: list[tuple[str, Location]] = []
        for key in keys.keys if keys else ():
            check_expression(key, stage.scope, model=self.model.name)
            name = self._name_of(key, "group")
            inner = key.node.unalias() if isinstance(key.node, exp.Alias) else key.node
            group_by.append(inner.copy())
            projection.append(key.node.copy())
            names.append((name, key.location))
        for assignment in aggregates.assignments if aggregates else ():
            check_expression(assignment.expr, stage.scope, model=self.model.name)
            projection.append(exp.alias_(assignment.expr.node.copy(), assignment.name))
            names.append((assignment.name, assignment.location))
        self._check_unique_names(names)
        self.lineage = {
            name: self.lineage[inner.name]
            for name, inner in (
                (
                    self._name_of(key, "group"),
                    key.node.unalias() if isinstance(key.node, exp.Alias) else key.node,
                )
                for key in (keys.keys if keys else ())
            )
            if isinstance(inner, exp.Column)
            and inner.table in ("", self.base_alias)
            and inner.name in self.lineage
        }
        self.has_window = self.has_window or any(
            has_window(a.expr.node) for a in (aggregates.assignments if aggregates else ())
        )
        for assignment in aggregates.assignments if aggregates else ():
            self._note_windows(assignment.expr.node, is_traceable=False)
        stage.projection = projection
        stage.group_by = group_by
        stage.output = tuple(name for name, _ in names)

    def select(self, step: SelectStep) -> None:
        stage = self.current_stage()
        if not stage.is_plain or stage.group_by is not None:
            stage = self.wrap()
        output: list[str] | None = []
        names: list[tuple[str, Location]] = []
        for item in step.items:
            check_expression(item, stage.scope, model=self.model.name)
            star = _star_columns(item.node, stage.scope)
            if star is not _NOT_A_STAR:
                if star is None or output is None:
                    output = None
                else:
                    output.extend(star)
                    names.extend((name, item.location) for name in star)
                continue
            name = self._name_of(item, "select")
            names.append((name, item.location))
            if output is not None:
                output.append(name)
        self._check_unique_names(names)
        for item in step.items:
            self._note_windows(item.node)
        self.lineage = self._lineage_after_select(step, stage)
        self.has_window = self.has_window or any(has_window(item.node) for item in step.items)
        stage.projection = [item.node.copy() for item in step.items]
        stage.output = tuple(output) if output is not None else None

    def set_operation(self, step: SetOperationStep) -> None:
        self.is_base_passthrough = False
        self.has_set_operation = True
        self.lineage = {}
        stage = self.current_stage()
        right_columns = self.columns_of(step.relation)
        if stage.output is not None and right_columns is not None and len(stage.output) != len(right_columns):
            raise self.error(
                E_SET_OPERATION,
                f"`{step.operator} {step.relation}` combines {len(stage.output)} columns with "
                f"{len(right_columns)} columns of `{step.relation}`",
                step.location,
                "both sides of a set operation need the same number of columns; add a `select` before it",
            )
        left_name = self._add_cte(stage.build())
        left = exp.select("*").from_(exp.to_table(left_name))
        right = exp.select("*").from_(self.relation(step.relation))
        if step.operator in ("union", "union all"):
            combined: exp.Query = exp.union(left, right, distinct=step.operator == "union")
        elif step.operator.startswith("except"):
            combined = exp.except_(left, right, distinct=not step.operator.endswith(" all"))
        else:
            combined = exp.intersect(left, right, distinct=not step.operator.endswith(" all"))
        name = self._add_cte(combined)
        self.stage = _Stage(
            exp.to_table(name).as_(self.base_alias),
            Scope(stage.output, {self.base_alias: stage.output}),
            stage.output,
        )

    def expand(self, step: ExpandStep) -> None:
        self.is_base_passthrough = False
        expanded = step.item.node.unalias() if isinstance(step.item.node, exp.Alias) else step.item.node
        for name in (step.item.output_name, expanded.name if isinstance(expanded, exp.Column) else None):
            self.lineage.pop(name or "", None)
        stage = self.current_stage()
        if not stage.is_plain or stage.group_by is not None or stage.late_lets:
            stage = self.wrap()
        check_expression(step.item, stage.scope, model=self.model.name)
        node = step.item.node
        alias = node.alias if isinstance(node, exp.Alias) else None
        inner = node.unalias() if isinstance(node, exp.Alias) else node
        if isinstance(inner, exp.Column):
            name = alias or inner.name
            if name != inner.name and stage.output is not None and name in stage.output:
                raise self.error(
                    E_DUPLICATE_COLUMN,
                    f"`expand {step.item.text}` names its element `{name}`, which is already a column",
                    step.item.location,
                    "pick another name for the element",
                )
            stage.star_except.append(exp.column(inner.name))
            stage.output = _extended(_without(stage.output, (inner.name,)), name)
        elif alias:
            name = alias
            if stage.output is not None and name in stage.output:
                raise self.error(
                    E_DUPLICATE_COLUMN,
                    f"`expand {step.item.text}` names its element `{name}`, which is already a column",
                    step.item.location,
                    "pick another name for the element",
                )
            stage.output = _extended(stage.output, name)
        else:
            raise self.error(
                E_UNNAMED_COLUMN,
                f"`expand {step.item.text}` needs a name",
                step.item.location,
                "write `expand <list expression> as name`",
            )
        stage.extra.append(exp.alias_(exp.Unnest(expressions=[inner.copy()]), name))
        stage.derived.add(name)
        stage.is_expanded = True

    def _join_keys(self, step: JoinStep) -> JoinKeys:
        """The equalities of an inner or left join between columns of `from` carried unchanged (the
        lineage before this join) and columns of the joined relation; anything else is a problem."""
        if step.kind not in ("inner", "left"):
            return JoinKeys(step.relation, problem=f"a {step.kind} join keeps rows no key of `from` matches")
        if step.relation == self.base_alias:
            return JoinKeys(step.relation, problem="the join reads the model's own `from`")
        if step.using:
            pairs = [(self.lineage.get(name), name) for name in step.using]
        elif step.on is not None:
            node = step.on.node.unnest()
            conjuncts = list(node.flatten()) if isinstance(node, exp.And) else [node]
            pairs = []
            for conjunct in conjuncts:
                pair = self._equality_keys(conjunct.unnest(), step.relation)
                if pair is None:
                    return JoinKeys(
                        step.relation,
                        problem=f"`{step.on.text}` is not made only of `{self.base_alias}.column = "
                        f"{step.relation}.column` equalities",
                    )
                pairs.append(pair)
        else:
            return JoinKeys(step.relation, problem="a join without keys")
        untraced = [right for base, right in pairs if base is None]
        if untraced:
            return JoinKeys(
                step.relation,
                problem=f"the key matched with `{step.relation}.{untraced[0]}` is not a column of "
                f"`{self.base_alias}` carried unchanged",
            )
        return JoinKeys(step.relation, tuple((base, right) for base, right in pairs if base is not None))

    def _equality_keys(self, node: exp.Expr, relation: str) -> tuple[str | None, str] | None:
        if not isinstance(node, exp.EQ):
            return None
        sides = [side.unnest() for side in (node.this, node.expression)]
        if not all(isinstance(side, exp.Column) for side in sides):
            return None
        left = [side for side in sides if side.table == self.base_alias]
        right = [side for side in sides if side.table == relation]
        if len(left) != 1 or len(right) != 1:
            return None
        return self.lineage.get(left[0].name), right[0].name

    def _lineage_after_join(self, step: JoinStep, right_columns: Columns) -> None:
        """Base columns keep their lineage unless the joined relation may supply a same-named one."""
        keeps_using = step.kind in ("inner", "left")
        for name in list(self.lineage):
            if name in step.using:
                if not keeps_using:
                    del self.lineage[name]
            elif right_columns is None or name in right_columns:
                del self.lineage[name]

    def _lineage_after_select(self, step: SelectStep, stage: _Stage) -> dict[str, str]:
        lineage: dict[str, str] = {}
        for item in step.items:
            star = _star_columns(item.node, stage.scope)
            if star is not _NOT_A_STAR:
                lineage.update({name: self.lineage[name] for name in star or () if name in self.lineage})
                continue
            inner = item.node.unalias() if isinstance(item.node, exp.Alias) else item.node
            name = item.output_name
            if isinstance(inner, exp.Column):
                base = self._base_of(inner)
                if base is not None:
                    lineage[name or inner.name] = base
        return lineage

    def _base_of(self, column: exp.Column) -> str | None:
        """The base-scope column a column reference of the current stage carries unchanged: by the
        lineage, or, qualified with `from`'s name in the first stage (which reads the base CTE
        itself), that base column even when a joined relation has a column of the same name."""
        if column.table not in ("", self.base_alias):
            return None
        if column.table and not self.ctes and column.name in (self.base_columns or ()):
            return column.name
        return self.lineage.get(column.name)

    def _note_windows(self, node: exp.Expr, *, in_base: bool = False, is_traceable: bool = True) -> None:
        """Narrow `window_keys` to the base columns in the PARTITION BY of each window in `node`."""
        for window in node.find_all(exp.Window):
            keys: set[str] = set()
            for part in window.args.get("partition_by") or () if is_traceable else ():
                if not isinstance(part, exp.Column):
                    continue
                if in_base:
                    is_base = part.table in ("", self.base_alias) and part.name in (
                        self.base_source_columns or ()
                    )
                    base = part.name if is_base else None
                else:
                    base = self._base_of(part)
                if base is not None:
                    keys.add(base)
            self.window_keys = keys if self.window_keys is None else self.window_keys & keys

    # -- helpers ------------------------------------------------------------------------------
    def _name_of(self, item: Expr, step: str) -> str:
        name = item.output_name
        if name is None:
            raise self.error(
                E_UNNAMED_COLUMN,
                f"`{item.text}` in `{step}` computes a column without a name",
                item.location,
                f"name it: `{item.text} as some_name`",
            )
        return name

    def _check_unique_names(self, names: list[tuple[str, Location]]) -> None:
        seen: set[str] = set()
        for name, location in names:
            if name in seen:
                raise self.error(
                    E_DUPLICATE_COLUMN,
                    f"two output columns are named `{name}`",
                    location,
                    "rename one of them",
                )
            seen.add(name)

    def finish(self) -> CompiledModel:
        base = self._base_select()
        final = (
            self.stage.build() if self.stage is not None else exp.select("*").from_(exp.to_table(BASE_CTE))
        )
        statement = final.with_(BASE_CTE, as_=base)
        for name, query in self.ctes:
            statement = statement.with_(name, as_=query)
        columns = self.stage.output if self.stage is not None else self.base_columns
        if columns is not None:
            duplicated = sorted({name for name in columns if columns.count(name) > 1})
            if duplicated:
                raise self.error(
                    E_DUPLICATE_COLUMN,
                    f"the output has more than one column named {', '.join(f'`{n}`' for n in duplicated)}",
                    self.model.location,
                    "after a `join ... on`, add a `select` that names each column once (or join `using`)",
                )
        return CompiledModel(
            name=self.model.name,
            statement=statement,
            columns=columns,
            base_relation=self.base_alias,
            base_columns=self.base_columns,
            is_base_passthrough=self.is_base_passthrough,
            let_names=tuple(self.lets),
            pushed_filters=len(self.base_where),
            lineage=tuple(sorted(self.lineage.items())),
            has_window=self.has_window,
            has_set_operation=self.has_set_operation,
            joins=tuple(self.joins),
            window_keys=tuple(sorted(self.window_keys)) if self.window_keys is not None else None,
            lets=tuple((name, node.copy()) for name, node in self.lets.items()),
        )

    def _base_select(self) -> exp.Select:
        replace = []
        extra = []
        for name, node in self.lets.items():
            value = exp.alias_(node.copy(), name)
            if self.base_source_columns is not None and name in self.base_source_columns:
                replace.append(value)
            else:
                extra.append(value)
        star = exp.Star(replace=replace) if replace else exp.Star()
        source = self.relation(self.base_alias).as_(self.base_alias)
        select = exp.select(star, *extra).from_(source)
        if self.base_where:
            select = select.where(exp.and_(*self.base_where))
        return select


class _NotAStar:
    pass


_NOT_A_STAR: tuple[str, ...] | None = _NotAStar()  # type: ignore[assignment]  # a sentinel no answer equals


def _star_columns(node: exp.Expr, scope: Scope) -> tuple[str, ...] | None:
    """The columns a `*` item expands to; _NOT_A_STAR for other items; None when not known."""
    if isinstance(node, exp.Star):
        star, columns = node, scope.columns
    elif isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
        star, columns = node.this, scope.relations.get(node.table, scope.columns)
    else:
        return _NOT_A_STAR
    if columns is None:
        return None
    excluded = {column.name for column in star.args.get("except_") or ()}
    return tuple(name for name in columns if name not in excluded)


def _join_kind(kind: str) -> str | None:
    return None if kind == "inner" else kind.upper()


def _extended(columns: Columns, name: str) -> Columns:
    if columns is None:
        return None
    return (*columns, name) if name not in columns else columns


def _without(columns: Columns, names: tuple[str, ...]) -> Columns:
    if columns is None:
        return None
    return tuple(name for name in columns if name not in names)


def _concat(left: Columns, right: Columns) -> Columns:
    if left is None or right is None:
        return None
    return (*left, *right)


def compile_model(model: Model, columns_of: ColumnsResolver) -> CompiledModel:
    """Compile one model; `columns_of` gives the columns of a relation it reads (None: unknown)."""
    return _PipelineCompiler(model, columns_of).compile()
