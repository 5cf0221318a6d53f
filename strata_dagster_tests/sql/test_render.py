"""DuckDB types built without DuckDB's parser (sql/render.py) are the trees its parser builds."""

import pytest
from sqlglot import exp

from strata_dagster.sql import render


@pytest.mark.parametrize("name", sorted(render._BUILT_TYPES))
def test_a_built_type_is_the_parsed_one(name):
    built = render.data_type(name)
    parsed = exp.DataType.build(name, dialect="duckdb")
    assert built == parsed and built.args == parsed.args
    assert built.sql(dialect="duckdb") == parsed.sql(dialect="duckdb")
    assert render.data_type(name) is not render.data_type(name)  # a fresh copy each call
