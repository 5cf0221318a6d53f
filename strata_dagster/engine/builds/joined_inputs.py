"""The partitions of a partitioned model that a change in a joined input reaches.

A row of `from` meets, in an inner or left equi-join, only the joined rows with its key values. So
when a joined input changes, the only partitions whose rows can change are those holding a row of
`from` whose key is one whose joined rows changed (inserted, deleted or edited). Each build records
per-key figures of every such joined input (a row count and row-hash sum per key, in a figures
table, see backends.sql.key_figures); the next build compares them with the input's figures now. A
join that is not an inner or left join on equalities of `from` columns carried unchanged, or a
build that recorded no figures, rebuilds every partition, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from strata_dagster.compile.compiler import JoinKeys
from strata_dagster.engine.builds.incremental import Fallback
from strata_dagster.engine.builds.state_figures import NULL_KEY
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.sql.content import ROW_ALIAS

FIGURES = "join_figures"  # detail key: joined input -> {"table", "keys", "columns"}


@dataclass(frozen=True)
class JoinedChange:
    """Partitions reached by changed keys of joined inputs, and the figures to record now."""

    partitions: set[str | None]
    figures: dict[str, Any]
    tables: list[str] = field(default_factory=list)  # figures tables this build wrote

    @property
    def reached(self) -> set[str]:
        """The partitions reached, named as partition keys are (NULL_KEY: the NULL partition)."""
        return {NULL_KEY if key is None else key for key in self.partitions}


def keyed_joins(ctx: IncrementalContext) -> dict[str, JoinKeys]:
    """Each joined input by name; an input joined more than once carries a problem."""
    joins: dict[str, JoinKeys] = {}
    for join in ctx.compiled.joins:
        if join.relation in joins:
            joins[join.relation] = JoinKeys(join.relation, problem="it is joined more than once")
        else:
            joins[join.relation] = join
    return joins


def _figures_table(ctx: IncrementalContext, relation: str) -> str:
    return f"{ctx.table_name}__by_{relation}"


def _write_figures(ctx: IncrementalContext, join: JoinKeys) -> dict[str, Any]:
    relation = ctx.relation(join.relation)
    table = _figures_table(ctx, join.relation)
    ctx.session.create_key_figures(table, relation, [right for _, right in join.keys])
    return {
        "table": table,
        "keys": [list(pair) for pair in join.keys],
        "columns": [list(column) for column in ctx.session.describe(relation)],
    }


def record_figures(ctx: IncrementalContext) -> dict[str, Any]:
    """What a full build records of every joined input whose join is keyed."""
    return {
        name: _write_figures(ctx, join) for name, join in keyed_joins(ctx).items() if join.problem is None
    }


def partitions_reached(
    ctx: IncrementalContext,
    changed: list[str],
    recorded: dict[str, Any],
    partition: Callable[[str], exp.Expr],
) -> JoinedChange | Fallback:
    """The partitions holding a `from` row whose key's rows changed in one of the `changed` joined
    inputs since the figures `recorded`; `partition(qualifier)` is a raw `from` row's partition."""
    joins = keyed_joins(ctx)
    for name in changed:
        join = joins.get(name)
        if join is None or join.problem is not None:
            why = join.problem if join is not None else "it is not joined by keys"
            return Fallback(f"`{name}` changed, and every partition may read it: {why}")
        before = recorded.get(name)
        if (
            before is None
            or before.get("keys") != [list(pair) for pair in join.keys]
            or not ctx.session.snapshot_exists(before["table"])
        ):
            return Fallback(f"`{name}` changed, and the last build recorded no figures per key of it")
        columns = [list(column) for column in ctx.session.describe(ctx.relation(name))]
        if before.get("columns") != columns:
            return Fallback(f"`{name}` changed its columns, and every partition reads it")
    figures = {name: value for name, value in recorded.items() if name in joins}
    reached: set[str | None] = set()
    tables: list[str] = []
    base = ctx.relation(ctx.compiled.base_relation)
    for name in changed:
        join = joins[name]
        now = _write_figures(ctx, join)
        tables.append(now["table"])
        keys = [right for _, right in join.keys]
        changed_table = f"{ctx.table_name}__changed_{name}"
        count = ctx.session.create_changed_keys(changed_table, recorded[name]["table"], now["table"], keys)
        if count:
            values = [ctx.compiled.base_expression(left, qualifier=ROW_ALIAS) for left, _ in join.keys]
            reached |= ctx.session.partitions_meeting(base, partition(ROW_ALIAS), values, changed_table, keys)
        ctx.session.drop_snapshot(changed_table)
        figures[name] = now
    return JoinedChange(reached, figures, tables)
