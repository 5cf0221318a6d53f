"""The Spark dialect check's cache (backends/dialect_check.py): a project checked again is answered
from it, and whatever the answer depends on (the model, its inputs' columns and types, the
engine) asks again. No JVM: the check is compile-time."""

from __future__ import annotations

import pytest

from strata_dagster.backends.dialect_check import check_cache_counts, check_engine
from strata_dagster.backends.spark.dialect.translate import EngineDialectError
from strata_dagster_tests.conftest import CUSTOMERS_COLUMNS
from strata_dagster_tests.support.helpers import SCHEMAS, compile_text

# `*` over a join: the Spark statement lists every input column (Spark orders `using` columns
# otherwise), so it changes with the inputs' schema.
JOINED = "model m {\n  from orders\n  join left customers using (customer_id)\n}\n"
DOWNSTREAM = JOINED + "model n {\n  from m\n  filter amount > 0\n}\n"


def _sql(statements) -> dict[str, str]:
    return {name: statement.sql(dialect="spark") for name, statement in statements.items()}


def _checked(text: str, schemas=SCHEMAS) -> tuple[dict[str, str], dict[str, int]]:
    before = check_cache_counts()
    statements = check_engine(compile_text(text, schemas=schemas), "spark", schemas, strict=True)
    after = check_cache_counts()
    return _sql(statements), {kind: after[kind] - before[kind] for kind in after}


def test_the_same_project_checked_again_is_answered_from_the_cache():
    first, _ = _checked(DOWNSTREAM)
    again, counts = _checked(DOWNSTREAM)
    assert counts == {"hits": 2, "misses": 0}
    assert again == first


def test_a_cached_statement_is_a_copy_the_caller_may_change():
    statements = check_engine(compile_text(JOINED), "spark", SCHEMAS, strict=True)
    expected = statements["m"].sql(dialect="spark")
    statements["m"].set("where", None)
    statements["m"].select("1 AS changed", copy=False)
    assert _checked(JOINED)[0]["m"] == expected


def test_a_new_source_column_is_checked_again_downstream_too():
    first, _ = _checked(DOWNSTREAM)
    wider = {**SCHEMAS, "customers": (*CUSTOMERS_COLUMNS, ("tier", "VARCHAR"))}
    again, counts = _checked(DOWNSTREAM, wider)
    assert counts["misses"] == 2  # m reads customers, n reads m
    assert "tier" not in first["m"] and "tier" in again["m"] and "tier" in again["n"]


def test_a_changed_column_type_is_checked_again():
    _checked(JOINED)
    retyped = {
        **SCHEMAS,
        "customers": (("customer_id", "BIGINT"), ("name", "INTEGER"), *CUSTOMERS_COLUMNS[2:]),
    }
    _, counts = _checked(JOINED, retyped)
    assert counts["misses"] == 1


def test_a_changed_model_is_checked_again():
    _checked(JOINED)
    changed, counts = _checked(JOINED.replace("join left", "join inner"))
    assert counts["misses"] == 1
    assert " LEFT JOIN " not in changed["m"].upper()


def test_duckdb_is_never_cached():
    before = check_cache_counts()
    check_engine(compile_text(JOINED), "duckdb", SCHEMAS)
    assert check_cache_counts() == before


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_refusal_is_reported_at_its_place_every_time(attempt):
    text = "model m {\n  from orders\n  derive v = hash(order_id)\n}\n"
    with pytest.raises(EngineDialectError) as raised:
        check_engine(compile_text(text), "spark", SCHEMAS)
    assert raised.value.code == "E070"
    assert (raised.value.location.line, raised.value.location.column) == (3, 14)
