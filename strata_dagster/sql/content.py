"""Content identities computed inside DuckDB: order-independent, duplicate-sensitive row hashes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.backends.choice import backend_version
from strata_dagster.fingerprint import digest
from strata_dagster.sql.render import data_type

# The alias a row is hashed through: hash(<alias>) hashes the whole row as a struct.
ROW_ALIAS = "__strata_row"

# What a relation's content figures cover: every column of every row (the empty tuple), or only a
# source's change column when the source is versioned by one (`versioning: cdc(col)`). By the cdc
# contract every insert or update stamps that column above every earlier value and a delete lowers
# the row count, so the row count and the column's range tell what changed; DuckDB answers them
# from its row-group statistics without reading the rows, where a hash of every row reads them all.
RowBasis = tuple[str, ...]
WHOLE_ROW: RowBasis = ()


@dataclass(frozen=True)
class Content:
    """What a relation holds: its schema, its row count, and a hash of its rows as a multiset (for
    a change-column basis: the column's range instead, see `is_summed`)."""

    columns: tuple[tuple[str, str], ...]
    row_count: int
    row_hash_sum: str
    basis: RowBasis = WHOLE_ROW

    @property
    def fingerprint(self) -> str:
        parts: tuple[object, ...] = (self.columns, self.row_count, self.row_hash_sum)
        if self.basis:
            parts += (("basis", self.basis),)
        return digest("content", backend_version(), *parts)

    @classmethod
    def empty(cls, columns: tuple[tuple[str, str], ...], basis: RowBasis = WHOLE_ROW) -> Content:
        """What a relation (or partition) with these columns and no row holds."""
        return cls(columns, 0, EMPTY_FIGURE, basis)


def as_rows(relation: exp.Table | exp.Query) -> exp.Expr:
    """`relation` aliased ROW_ALIAS, to read from (a copy: the caller's tree stays its own)."""
    if isinstance(relation, exp.Query):
        return relation.subquery(ROW_ALIAS)
    source = relation.copy()
    source.set("alias", exp.TableAlias(this=exp.to_identifier(ROW_ALIAS)))
    return source


def row_source(select: exp.Select) -> exp.Expr | None:
    """The relation a SELECT reads as `__strata_row` (whose columns a whole-row hash covers)."""
    source = select.args.get("from_") or select.args.get("from")
    relation = source.this if source is not None else None
    return relation if relation is not None and relation.alias_or_name == ROW_ALIAS else None


def is_summed(basis: RowBasis) -> bool:
    """Whether content figures over `basis` are row-hash sums, which add and subtract over disjoint
    row sets; a change-column range does not."""
    return not basis


EMPTY_FIGURE = "0"  # the second figure of a relation with no row, on every basis


def row_hash_aggregates(basis: RowBasis = WHOLE_ROW) -> list[exp.Expr]:
    """Row count and the second content figure: the row-hash sum, or the change column's range."""
    if not is_summed(basis):
        return [exp.func("count_star"), _change_range(basis)]
    # A sum of 64-bit row hashes in a HUGEINT: order-independent, and a duplicate row counts twice.
    row_hash_value = exp.cast(exp.func("hash", exp.column(ROW_ALIAS)), data_type("HUGEINT"))
    return [
        exp.func("count_star"),
        exp.func("coalesce", exp.func("sum", row_hash_value), exp.Literal.number(EMPTY_FIGURE)),
    ]


def _change_range(basis: RowBasis) -> exp.Expr:
    """`min .. max` of each change column, as text (EMPTY_FIGURE when every value is NULL)."""
    bounds: list[exp.Expr] = []
    for column in basis:
        for aggregate in ("min", "max"):
            bounds.append(exp.cast(exp.func(aggregate, exp.column(column, table=ROW_ALIAS)), "VARCHAR"))
    text = bounds[0]
    for bound in bounds[1:]:
        text = exp.DPipe(this=text, expression=exp.DPipe(this=exp.Literal.string(" .. "), expression=bound))
    return exp.func("coalesce", text, exp.Literal.string(EMPTY_FIGURE))
