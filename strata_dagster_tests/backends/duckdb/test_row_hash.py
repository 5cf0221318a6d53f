"""Content identities tell 128-bit integers apart (backends.sql.row_hash): DuckDB hashes a HUGEINT
as the XOR of its halves' hashes, so -1 and 0 (and a DECIMAL(38,2)'s -0.01 and 0.00) hashed alike,
and a `sum` whose total went from -1 to 0 looked unchanged (an acceptance history found it)."""

from collections import Counter

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from strata_dagster.backends.sql import row_hash
from strata_dagster.backends.sql.figures import content_by_group, content_of, key_sum
from strata_dagster.sql.content import ROW_ALIAS, as_rows, row_hash_aggregates

PAIRS = [
    ("HUGEINT", "-1", "0"),
    ("DECIMAL(38,2)", "-0.01", "0.00"),
    ("UHUGEINT", "18446744073709551617", "0"),  # 2^64 + 1: both halves 1
    ("HUGEINT", "-18446744073709551617", "18446744073709551617"),  # wider than 64 bits
    ("DECIMAL(38,20)", "-0.00000000000000000001", "0"),  # a scale no 64-bit DECIMAL holds
    ("HUGEINT[]", "[-1]", "[0]"),
    ("STRUCT(a HUGEINT)", "{'a': -1}", "{'a': 0}"),
]


def table_of(con: duckdb.DuckDBPyConnection, name: str, type_name: str, values: list[str]) -> exp.Table:
    con.execute(f"CREATE TABLE {name} (id INTEGER, x {type_name})")
    for value in values:
        con.execute(f"INSERT INTO {name} VALUES (1, CAST({value} AS {type_name}))")
    return exp.table_(name)


@pytest.mark.parametrize(("type_name", "one", "other"), PAIRS)
def test_rows_differing_only_in_a_128_bit_value_have_different_contents(type_name, one, other):
    con = duckdb.connect()
    first = content_of(con, table_of(con, "a", type_name, [one]))
    second = content_of(con, table_of(con, "b", type_name, [other]))
    again = content_of(con, table_of(con, "c", type_name, [one]))
    assert first.row_hash_sum != second.row_hash_sum
    assert first.row_hash_sum == again.row_hash_sum
    nulls = content_of(con, table_of(con, "d", type_name, ["NULL"]))
    assert nulls.row_hash_sum not in (first.row_hash_sum, second.row_hash_sum)


def test_grouped_figures_add_up_to_the_content_with_128_bit_columns():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 3 AS g, CAST(i - 2 AS HUGEINT) AS total FROM range(6) r(i)")
    groups = content_by_group(con, exp.table_("t"), exp.column("g", table=ROW_ALIAS))
    whole = content_of(con, exp.table_("t"))
    assert sum(int(figures[1]) for figures in groups.values()) == int(whole.row_hash_sum)


@pytest.mark.parametrize(("type_name", "one", "other"), PAIRS[:5])
def test_key_and_change_column_sums_tell_128_bit_keys_and_versions_apart(type_name, one, other):
    """An upsert's key-and-cdc figures hash only those columns: a key (or version) of -1 against
    0 must count as another row there too, whatever else the relation holds."""
    con = duckdb.connect()
    for name, value in (("a", one), ("b", other)):
        con.execute(f"CREATE TABLE {name} (k {type_name}, v {type_name}, note VARCHAR)")
        con.execute(
            f"INSERT INTO {name} VALUES (CAST({value} AS {type_name}), CAST({value} AS {type_name}), 'x')"
        )
    for columns in (["k"], ["k", "v"], ["note", "v"]):
        assert key_sum(con, exp.table_("a"), columns) != key_sum(con, exp.table_("b"), columns), columns
    con.execute("CREATE TABLE narrow AS SELECT 1::BIGINT AS k, 'x' AS note")
    plain = exp.select(exp.func("hash", exp.column("k", table=ROW_ALIAS))).from_(
        as_rows(exp.table_("narrow"))
    )
    assert row_hash.encoded(con, plain) is None
    # Only the hashed columns count: a 128-bit column beside them leaves the statement as it is.
    beside = exp.select(exp.func("hash", exp.column("note", table=ROW_ALIAS))).from_(as_rows(exp.table_("a")))
    assert row_hash.encoded(con, beside) is None


def test_a_relation_without_128_bit_columns_hashes_as_before():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id BIGINT, amount DECIMAL(18,2), name VARCHAR)")
    statement = exp.select(*row_hash_aggregates()).from_(as_rows(exp.table_("t")))
    assert row_hash.encoded(con, statement) is None


# Few values, so that the walk often meets rows equal but for a -1 against a 0.
values = st.sampled_from(["-1", "0", "1", "NULL"])
rows = st.lists(st.tuples(values, values), max_size=3)


@settings(max_examples=60, deadline=None)
@given(one=rows, other=rows)
def test_contents_are_equal_exactly_when_the_row_multisets_are(one, other):
    con = duckdb.connect()
    for name, held in (("a", one), ("b", other)):
        con.execute(f"CREATE TABLE {name} (total HUGEINT, amount DECIMAL(38,2))")
        for total, amount in held:
            con.execute(f"INSERT INTO {name} VALUES ({total}, {amount} / 100)")
    first, second = content_of(con, exp.table_("a")), content_of(con, exp.table_("b"))
    is_same = Counter(one) == Counter(other)
    assert ((first.row_count, first.row_hash_sum) == (second.row_count, second.row_hash_sum)) == is_same
