"""`--models` selectors resolved against a project (names, globs, tag:, +upstream, downstream+,
comma unions), their E025 errors with did-you-mean, and the `tags` property they select by."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata_dagster.engine.context import select_models
from strata_dagster.engine.partition_keys import parse_partitions
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project
from strata_dagster.language.selection import select, split_selection
from strata_dagster_tests.support.engine_support import SHOP, SHOP_MODELS
from strata_dagster_tests.support.helpers import project_of

SMALL = """
model a {
  from orders
  tags: [core]
}
model b { from a }
model c {
  from b
  tags: [core, 'late-v2', x.y]
}
model d {
  from customers
  tags: reference
}
model e {
  from c
  union all d
}
model b2 { from a }
"""


@pytest.fixture(scope="module")
def shop():
    return load_project(SHOP)


@pytest.fixture(scope="module")
def small():
    return project_of(SMALL)


SHOP_CASES = [
    ("orders_enriched", {"orders_enriched"}),
    ("+orders_enriched", {"orders_enriched", "stg_orders", "stg_customers"}),
    ("stg_customers+", {"stg_customers", "orders_enriched", "daily_revenue", "monthly_revenue"}),
    ("+daily_revenue+", {"daily_revenue", "monthly_revenue", "stg_orders", "stg_customers"}),
    ("stg_*", {"stg_orders", "stg_customers"}),
    ("order_*", {"order_tags", "order_timeline", "order_status_log"}),
    ("*_revenue", {"daily_revenue", "monthly_revenue"}),
    ("tag:finance", {"daily_revenue", "monthly_revenue"}),
    ("tag:monthly", {"monthly_revenue"}),
    ("+tag:monthly", {"monthly_revenue", "daily_revenue", "stg_orders", "stg_customers"}),
    ("stg_orders+1", {"stg_orders", "orders_enriched", "order_tags", "daily_revenue"}),
    ("1+monthly_revenue", {"monthly_revenue", "daily_revenue"}),
    ("stg_*,tag:monthly", {"stg_orders", "stg_customers", "monthly_revenue"}),
    ("stg_orders, first_seen_orders", {"stg_orders", "first_seen_orders"}),
    ("stg_orders first_seen_orders", {"stg_orders", "first_seen_orders"}),
    ("first_seen_orders+", {"first_seen_orders", "order_timeline"}),
    ("stg_orders,stg_orders,stg_*", {"stg_orders", "stg_customers"}),
]


@pytest.mark.parametrize(("selection", "expected"), SHOP_CASES)
def test_every_selector_form_on_the_shop_example(shop, selection, expected):
    selected = select_models(shop, [selection])
    assert set(selected) == expected
    assert selected == tuple(name for name in shop.order if name in expected)  # dependency order


def test_no_selection_is_every_model(shop):
    assert select_models(shop, []) == select_models(shop, None) == shop.order
    assert set(shop.order) == SHOP_MODELS


@pytest.mark.parametrize("items", [[""], [" , "], [",", ""]])
def test_a_selection_given_empty_is_e025_not_every_model(shop, items):
    with pytest.raises(StrataError) as caught:
        select_models(shop, items)
    assert caught.value.code == "E025" and "names no model" in caught.value.message


@pytest.mark.parametrize("values", [[""], [","], [" , ", ""]])
def test_partitions_given_empty_are_e040(values):
    with pytest.raises(StrataError) as caught:
        parse_partitions(values)
    assert caught.value.code == "E040" and "names no partition" in caught.value.message


def test_selectors_on_a_small_project(small):
    cases = {
        "b": {"b"},
        "+e": {"a", "b", "c", "d", "e"},
        "a+": {"a", "b", "b2", "c", "e"},
        "+c+": {"a", "b", "c", "e"},
        "a+1": {"a", "b", "b2"},
        "2+e": {"b", "c", "d", "e"},
        "b*": {"b", "b2"},
        "b?": {"b2"},
        "[ad]": {"a", "d"},
        "tag:core": {"a", "c"},
        "tag:late-v2": {"c"},
        "tag:x.y+": {"c", "e"},
        "tag:reference+": {"d", "e"},
        "+tag:reference,b2": {"d", "b2"},
        "d,b": {"b", "d"},
    }
    for selection, expected in cases.items():
        assert set(select(small, [selection])) == expected, selection
    # Several items, each with several selectors: one union.
    assert set(select(small, ["b,d", "tag:core"])) == {"a", "b", "c", "d"}


def codes(error: StrataError) -> list[str]:
    return [item.code for item in error.errors]


def test_an_unknown_name_is_e025_with_did_you_mean(shop):
    with pytest.raises(StrataError) as caught:
        select_models(shop, ["+orders_enrichd"])
    assert caught.value.code == "E025"
    assert "did you mean `orders_enriched`?" in caught.value.hint
    assert "orders_enrichd" in caught.value.message


def test_an_unknown_tag_is_e025_with_did_you_mean(shop, small):
    with pytest.raises(StrataError) as caught:
        select_models(shop, ["tag:financ"])
    assert caught.value.code == "E025"
    assert "did you mean `tag:finance`?" in caught.value.hint
    with pytest.raises(StrataError) as caught:
        select(project_of("model m { from orders }"), ["tag:core"])
    assert caught.value.code == "E025" and "no model declares" in caught.value.hint


def test_a_glob_or_source_that_matches_no_model_is_e025(shop):
    for selection in ("fct_*", "orders", "+customers"):
        with pytest.raises(StrataError) as caught:
            select_models(shop, [selection])
        assert caught.value.code == "E025", selection
    with pytest.raises(StrataError) as caught:
        select_models(shop, ["orders"])
    assert "is a source" in caught.value.message


@pytest.mark.parametrize(
    "selection", ["++stg_orders", "stg_orders++", "+", "tag:", "tag:bad!", "a+b", "x:y", "1stg"]
)
def test_a_malformed_selector_is_e025(shop, selection):
    with pytest.raises(StrataError) as caught:
        select_models(shop, [selection])
    assert codes(caught.value) == ["E025"]
    assert "is not a model selector" in caught.value.message


def test_spaces_separate_selectors(shop):
    assert select_models(shop, ["stg_orders  tag:monthly"]) == ("stg_orders", "monthly_revenue")
    with pytest.raises(StrataError) as caught:
        select_models(shop, ["st g"])
    assert codes(caught.value) == ["E025", "E025"]


def test_every_unmatched_selector_is_reported_at_once(shop):
    with pytest.raises(StrataError) as caught:
        select_models(shop, ["stg_orders,nope,tag:none,++a,zz_*"])
    assert codes(caught.value) == ["E025"] * 4
    # In the order they were written.
    assert [item.message.split("`")[1] for item in caught.value.errors] == ["nope", "none", "++a", "zz_*"]


def test_split_selection():
    assert split_selection(" a, +b  c,,tag:x+ ") == ("a", "+b", "c", "tag:x+")
    assert split_selection("") == ()


# A random project: model m<i> reads a non-empty subset of m0..m<i-1> (m0 reads the source).
dags = st.integers(min_value=1, max_value=7).flatmap(
    lambda size: st.tuples(
        st.just(size),
        st.lists(st.lists(st.booleans(), min_size=size, max_size=size), min_size=size, max_size=size),
    )
)


def dag_project(size: int, bits: list[list[bool]]):
    parents = {0: []}
    lines = ["model m0 { from orders }"]
    for index in range(1, size):
        chosen = [other for other in range(index) if bits[index][other]] or [index - 1]
        parents[index] = chosen
        steps = [f"from m{chosen[0]}"] + [f"union all m{other}" for other in chosen[1:]]
        lines.append(f"model m{index} {{\n  " + "\n  ".join(steps) + "\n}")
    return project_of("\n".join(lines)), parents


def closure(start: int, edges: dict[int, list[int]]) -> set[int]:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        for other in edges.get(node, []):
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return seen


@settings(max_examples=30, deadline=None)
@given(dags, st.data())
def test_graph_operators_are_ancestors_and_descendants(dag, data):
    size, bits = dag
    project, parents = dag_project(size, bits)
    children: dict[int, list[int]] = {}
    for child, ups in parents.items():
        for up in ups:
            children.setdefault(up, []).append(child)
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    other = data.draw(st.integers(min_value=0, max_value=size - 1))

    def names(indices):
        return {f"m{i}" for i in indices}

    up = names(closure(index, parents))
    down = names(closure(index, children))
    here = {f"m{index}"}
    assert set(select(project, [f"+m{index}"])) == here | up
    assert set(select(project, [f"m{index}+"])) == here | down
    assert set(select(project, [f"+m{index}+"])) == here | up | down
    assert set(select(project, [f"m{index}+1"])) == here | names(children.get(index, []))
    assert set(select(project, [f"1+m{index}"])) == here | names(parents[index])
    union = select(project, [f"+m{index},m{other}+"])
    assert set(union) == set(select(project, [f"+m{index}"])) | set(select(project, [f"m{other}+"]))
    assert union == tuple(name for name in project.order if name in set(union))


# The `tags` property.


def test_tags_are_parsed_in_order(small, shop):
    assert small.models["a"].properties.tags == ("core",)
    assert small.models["c"].properties.tags == ("core", "late-v2", "x.y")
    assert small.models["d"].properties.tags == ("reference",)
    assert small.models["b"].properties.tags == ()
    assert shop.models["daily_revenue"].properties.tags == ("finance", "daily")


@pytest.mark.parametrize(
    ("value", "column"),
    [
        ("[core, 'two words']", 16),
        ("[core, a/b]", 16),
        ("['']", 10),
        ("[" + "x" * 64 + "]", 10),
        ("[core, core]", 16),
        ("'a:b'", 9),
    ],
)
def test_a_bad_tag_is_e007_at_its_position(value, column):
    with pytest.raises(StrataError) as caught:
        project_of(f"model m {{\n  from orders\n  tags: {value}\n}}\n")
    assert caught.value.code == "E007"
    assert (caught.value.location.line, caught.value.location.column) == (3, column)


def test_tags_without_a_value_or_twice_are_coded():
    with pytest.raises(StrataError) as caught:
        project_of("model m {\n  from orders\n  tags\n}\n")
    assert caught.value.code == "E007"
    with pytest.raises(StrataError) as caught:
        project_of("model m {\n  from orders\n  tags: [a]\n  tags: [b]\n}\n")
    assert caught.value.code == "E006"
