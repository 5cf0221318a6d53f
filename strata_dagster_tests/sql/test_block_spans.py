"""The spans of a raw integer key around some of its key blocks (sql.segments.block_spans) hold
every value of those blocks, negative ones and the type's extremes included: they only narrow a
read, the match on the blocks stays beside them."""

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from strata_dagster.sql.render import render
from strata_dagster.sql.segments import KEY_BLOCK, MAX_BLOCK_SPANS, block_spans, partition_key

LIMIT = 40 * KEY_BLOCK
blocks = st.lists(st.integers(-40, 40), min_size=1, max_size=60)


def values_in(predicate: exp.Expr, type_name: str, values: str) -> set[int]:
    query = (
        exp.select("k").from_(f"(SELECT CAST(v AS {type_name}) AS k FROM {values} AS t(v))").where(predicate)
    )
    con = duckdb.connect()
    try:
        return {row[0] for row in con.execute(render(query)).fetchall()}
    finally:
        con.close()


@settings(max_examples=40, deadline=None)
@given(chosen=blocks)
def test_the_spans_hold_every_value_of_the_blocks(chosen):
    key = exp.column("k")
    spans = block_spans(key, "BIGINT", chosen)
    assert spans is not None
    in_blocks = exp.In(this=partition_key(key, "block"), expressions=[exp.Literal.number(b) for b in chosen])
    values = f"range({-LIMIT - KEY_BLOCK}, {LIMIT + KEY_BLOCK})"
    assert values_in(in_blocks, "BIGINT", values) <= values_in(spans, "BIGINT", values)
    assert len(list(spans.find_all(exp.Between))) <= MAX_BLOCK_SPANS


def test_the_spans_stop_at_the_types_extremes():
    key = exp.column("k")
    top = (2**63 - 1) // KEY_BLOCK
    spans = block_spans(key, "BIGINT", [top, -top])
    assert spans is not None
    extremes = "(VALUES (9223372036854775807), (-9223372036854775807), (0))"
    assert values_in(spans, "BIGINT", extremes) == {2**63 - 1, -(2**63) + 1}
    small = block_spans(key, "TINYINT", [1, 2, -2])
    assert small is not None
    assert values_in(small, "TINYINT", "range(-128, 128)") == set(range(64, 128)) | {-128}


def test_no_spans_for_a_key_that_is_no_integer():
    assert block_spans(exp.column("k"), "VARCHAR", [1]) is None
    assert block_spans(exp.column("k"), "BIGINT", []) is None
