"""Arbitrary text never makes the loader or the compiler raise anything but a StrataError."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.compile import compile_project
from strata_dagster.errors import StrataError
from strata_dagster.language import load_text

WORDS = [
    "source",
    "model",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    ":",
    "=",
    "\n",
    " ",
    "--",
    "'",
    '"',
    "from",
    "join",
    "left",
    "on",
    "using",
    "filter",
    "let",
    "derive",
    "group",
    "aggregate",
    "select",
    "union",
    "all",
    "except",
    "intersect",
    "expand",
    "as",
    "incremental",
    "merge_strategy",
    "upsert",
    "merge_keys",
    "cdc_column",
    "partitioned_by",
    "day",
    "month",
    "start",
    "2025-01-01",
    "contract",
    "unique",
    "order_by",
    "table",
    "raw.orders",
    "versioning",
    "cdc",
    "lateness",
    "'10 minutes'",
    "orders",
    "m",
    "x",
    "amount",
    "1",
    "*",
    "+",
    "sum",
    "count",
    "case",
    "when",
    "then",
    "end",
    "->",
]

near_miss_modules = st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join)
arbitrary_text = st.text(max_size=300)
valid_prefix = st.just("source orders { table: raw.orders }\nmodel m {\n  from orders\n  ")


def load_and_compile(text: str) -> None:
    try:
        project = load_text(text)
        compile_project(project, {"orders": ["order_id", "amount", "status", "updated_at"]})
    except StrataError as error:
        assert error.code.startswith("E") and len(error.code) == 4
        assert error.render().startswith("error[")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arbitrary_text)
def test_arbitrary_text(text):
    load_and_compile(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_miss_modules)
def test_near_miss_modules(text):
    load_and_compile(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_prefix, near_miss_modules, st.sampled_from(["\n}\n", "}\n", ""]))
def test_model_bodies(prefix, body, suffix):
    load_and_compile(prefix + body + suffix)


def test_deeply_nested_brackets():
    text = "model m {\n  from orders\n  filter " + "(" * 5000 + "1" + ")" * 5000 + "\n}\n"
    with pytest.raises(StrataError) as caught:
        compile_project(load_text("source orders { table: raw.orders }\n" + text), {"orders": ["order_id"]})
    assert caught.value.code in ("E001", "E002")
