"""Per-key figures of a joined relation: which join keys' rows changed between two builds.

A figures table holds, for each value of a relation's join keys, the row count and row-hash sum of
its rows with that value (rows with a NULL key are left out: an equality join never matches them).
Two figures tables of the same keys differ exactly at the keys whose rows were inserted, deleted
or changed in between; a row of the model's `from` meets the same joined rows as before unless
its key is one of those.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from strata_dagster.backends.sql.runner import Connection, run
from strata_dagster.backends.sql.snapshot_kinds import SnapshotKinds
from strata_dagster.backends.sql.tables import create_snapshot
from strata_dagster.sql.content import ROW_ALIAS, as_rows, row_hash_aggregates
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import keyed_rows

ROWS, HASH_SUM = "__rows", "__hash_sum"
_BEFORE, _AFTER = "__before", "__after"


def create_key_figures(
    con: Connection,
    name: str,
    relation: exp.Table | exp.Query,
    keys: Sequence[str],
    files: SnapshotKinds,
) -> None:
    """A table of `relation`'s row count and row-hash sum per value of `keys` (none NULL)."""
    columns = [exp.column(key, table=ROW_ALIAS) for key in keys]
    count, hash_sum = row_hash_aggregates()
    query = (
        exp.select(*(column.copy().as_(key) for column, key in zip(columns, keys, strict=True)))
        .select(count.as_(ROWS), hash_sum.as_(HASH_SUM), copy=False)
        .from_(as_rows(relation))
        .where(exp.and_(*(exp.not_(exp.Is(this=column, expression=exp.null())) for column in columns)))
        .group_by(*(exp.Literal.number(index + 1) for index in range(len(keys))))
    )
    create_snapshot(con, name, query, files)


def create_changed_keys(
    con: Connection,
    name: str,
    before: str,
    after: str,
    keys: Sequence[str],
    files: SnapshotKinds,
) -> int:
    """A table of the keys whose figures differ between figures tables `before` and `after` (a key
    in one of them only, or with other figures). Returns how many."""
    match = exp.and_(
        *(
            exp.EQ(this=exp.column(key, table=_BEFORE), expression=exp.column(key, table=_AFTER))
            for key in keys
        )
    )
    differs = exp.or_(
        *(
            exp.NullSafeNEQ(
                this=exp.column(figure, table=_BEFORE), expression=exp.column(figure, table=_AFTER)
            )
            for figure in (ROWS, HASH_SUM)
        )
    )
    query = (
        exp.select(
            *(
                exp.func("coalesce", exp.column(key, table=_BEFORE), exp.column(key, table=_AFTER)).as_(key)
                for key in keys
            )
        )
        .from_(snapshot_table(before).as_(_BEFORE))
        .join(snapshot_table(after).as_(_AFTER), on=match, join_type="full")
        .where(differs)
    )
    create_snapshot(con, name, query, files)
    return int(run(con, exp.select(exp.Count(this=exp.Star())).from_(snapshot_table(name))).fetchone()[0])


def partitions_meeting(
    con: Connection,
    relation: exp.Table | exp.Query,
    partition: exp.Expr,
    values: Sequence[exp.Expr],
    keys_table: str,
    keys: Sequence[str],
) -> set[str | None]:
    """The partitions (as text; None for NULL) of the rows of `relation` (aliased ROW_ALIAS) whose
    `values` equal the `keys` of a row of `keys_table`."""
    query = (
        exp.select(exp.cast(partition.copy(), "VARCHAR"))
        .distinct()
        .from_(as_rows(relation))
        .where(keyed_rows(keys, values, keys_table=keys_table, is_null_free_filter=True))
    )
    return {row[0] for row in run(con, query).fetchall()}
