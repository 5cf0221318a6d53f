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


def merged_one_gap_at_a_time(chosen: list[int]) -> list[tuple[int, int]]:
    """The reference: runs of consecutive blocks, merged across the smallest gap (the first of
    equal ones) until MAX_BLOCK_SPANS are left."""
    runs: list[list[int]] = []
    for block in sorted(set(chosen)):
        if runs and block == runs[-1][1] + 1:
            runs[-1][1] = block
        else:
            runs.append([block, block])
    while len(runs) > MAX_BLOCK_SPANS:
        gap = min(range(len(runs) - 1), key=lambda index: runs[index + 1][0] - runs[index][1])
        runs[gap][1] = runs[gap + 1][1]
        del runs[gap + 1]
    return [(first, last) for first, last in runs]


def spans_of(spans: exp.Expr) -> list[tuple[int, int]]:
    return [
        (int(span.args["low"].find(exp.Literal).this), int(span.args["high"].find(exp.Literal).this))
        for span in spans.find_all(exp.Between)
    ]


@settings(max_examples=60, deadline=None)
@given(chosen=st.lists(st.integers(-5_000, 5_000), min_size=1, max_size=400))
def test_the_spans_merge_the_runs_of_blocks_across_the_smallest_gaps(chosen):
    spans = block_spans(exp.column("k"), "BIGINT", chosen)
    assert spans is not None
    expected = [
        (
            first * KEY_BLOCK - (KEY_BLOCK - 1 if first <= 0 else 0),
            last * KEY_BLOCK + (KEY_BLOCK - 1 if last >= 0 else 0),
        )
        for first, last in merged_one_gap_at_a_time(chosen)
    ]
    assert sorted(spans_of(spans)) == sorted(expected)


def test_thousands_of_scattered_blocks_give_at_most_the_span_limit():
    chosen = list(range(0, 6_000 * 37, 37))  # 6,000 blocks, no two adjacent
    spans = block_spans(exp.column("k"), "BIGINT", chosen)
    assert spans is not None
    found = sorted(spans_of(spans))
    assert len(found) == MAX_BLOCK_SPANS
    assert found[0][0] == -(KEY_BLOCK - 1) and found[-1][1] == chosen[-1] * KEY_BLOCK + KEY_BLOCK - 1
