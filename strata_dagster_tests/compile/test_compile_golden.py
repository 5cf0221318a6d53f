"""Golden fixtures: each golden/*.strata compiles to exactly golden/*.sql.

Regenerate after an intended change with STRATA_UPDATE_GOLDEN=1 and review the diff.
"""

import os

import duckdb
import pytest

from strata_dagster_tests.support.helpers import compile_text
from strata_dagster_tests.support.paths import GOLDEN

GOLDEN = GOLDEN
CASES = sorted(path.stem for path in GOLDEN.glob("*.strata"))


def render(stem: str) -> str:
    text = (GOLDEN / f"{stem}.strata").read_text()
    compiled = compile_text(text)
    local = [
        name for name in compiled.project.order if compiled.project.module_of(name).path.name == "m.strata"
    ]
    parts = [f"-- model {name}\n{compiled.sql(name, pretty=True)};\n" for name in local]
    return "\n".join(parts)


@pytest.mark.parametrize("stem", CASES)
def test_golden_sql(stem):
    expected_path = GOLDEN / f"{stem}.sql"
    actual = render(stem)
    if os.environ.get("STRATA_UPDATE_GOLDEN"):
        expected_path.write_text(actual)
    assert expected_path.exists(), f"missing {expected_path.name}: run with STRATA_UPDATE_GOLDEN=1"
    assert actual == expected_path.read_text()


@pytest.mark.parametrize("stem", [stem for stem in CASES if stem != "file_source"])
def test_golden_sql_binds_in_duckdb(stem, tmp_path):
    """Every golden statement is valid DuckDB SQL against tables of the fixture schemas."""
    from strata_dagster_tests.conftest import CUSTOMERS_COLUMNS, ORDERS_COLUMNS

    compiled = compile_text((GOLDEN / f"{stem}.strata").read_text())
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("CREATE SCHEMA raw")
    for table, columns in (("raw.orders", ORDERS_COLUMNS), ("raw.customers", CUSTOMERS_COLUMNS)):
        ddl = ", ".join(f"{name} {kind}" for name, kind in columns)
        con.execute(f"CREATE TABLE {table} ({ddl})")
    for name in compiled.project.order:
        con.execute(f"CREATE VIEW main.v_{name} AS {compiled.sql(name)}")
        described = [row[0] for row in con.execute(f"DESCRIBE main.v_{name}").fetchall()]
        assert tuple(described) == compiled.models[name].columns
    con.close()
