"""The backend is chosen as `--backend` / `STRATA_BACKEND`, and still by their former names
`--engine` / `STRATA_ENGINE`: the same choice, the new name first."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from strata_dagster.backends.choice import backend_choice
from strata_dagster.cli.main import main
from strata_dagster.errors import E_BACKEND, StrataError
from strata_dagster_tests.support.paths import REPO

SHOP = REPO / "examples" / "shop"


@pytest.fixture
def no_backend_variables(monkeypatch):
    for variable in ("STRATA_BACKEND", "STRATA_ENGINE", "STRATA_SPARK_REMOTE"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("environment", "chosen"),
    [
        ({}, "duckdb"),
        ({"STRATA_BACKEND": "spark"}, "spark"),
        ({"STRATA_ENGINE": "spark"}, "spark"),
        ({"STRATA_BACKEND": "duckdb", "STRATA_ENGINE": "spark"}, "duckdb"),
        ({"STRATA_BACKEND": "", "STRATA_ENGINE": "spark"}, "spark"),
    ],
)
def test_the_environment_names_the_backend_by_either_name(no_backend_variables, environment, chosen):
    for variable, value in environment.items():
        no_backend_variables.setenv(variable, value)
    assert backend_choice().name == chosen
    assert backend_choice("duckdb").name == "duckdb"  # a name given outranks both variables


@pytest.mark.parametrize("variable", ["STRATA_BACKEND", "STRATA_ENGINE"])
def test_an_unknown_backend_names_the_variable_that_gave_it(no_backend_variables, variable):
    no_backend_variables.setenv(variable, "oracle")
    with pytest.raises(StrataError) as caught:
        backend_choice()
    assert caught.value.code == E_BACKEND
    assert variable in caught.value.render()


def _compile(tmp_path: Path, *options: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["compile", str(SHOP), "--warehouse", str(tmp_path / "none.duckdb"), *options]
    )
    return result.exit_code, result.output


def test_backend_and_its_former_name_engine_choose_alike(no_backend_variables, tmp_path):
    """`strata compile` prints the SQL the chosen backend runs: Spark's differs from DuckDB's."""
    duckdb = _compile(tmp_path, "--backend", "duckdb")
    spark = _compile(tmp_path, "--backend", "spark")
    assert duckdb[0] == 0 and spark[0] == 0, (duckdb, spark)
    assert spark[1] != duckdb[1]
    assert _compile(tmp_path, "--engine", "spark") == spark
    assert _compile(tmp_path, "--engine", "duckdb") == duckdb
    assert _compile(tmp_path) == duckdb
    no_backend_variables.setenv("STRATA_BACKEND", "spark")
    assert _compile(tmp_path) == spark


@pytest.mark.parametrize("option", ["--backend", "--engine"])
def test_an_unknown_backend_option_is_refused_by_either_name(tmp_path, option):
    code, output = _compile(tmp_path, option, "oracle")
    assert code == 2 and "E074" in output, output


def test_help_shows_backend_and_hides_its_former_name():
    result = CliRunner().invoke(main, ["run", "--help"], prog_name="strata")
    assert result.exit_code == 0
    assert "--backend [duckdb|spark]" in result.output
    assert "--engine" not in result.output


def test_the_dagster_resource_takes_backend_and_its_former_name_engine(no_backend_variables, tmp_path):
    from strata_dagster.orchestration import StrataResource

    def chosen(**settings: str) -> str:
        resource = StrataResource(project_dir=str(SHOP), warehouse=str(tmp_path / "w"), **settings)
        return resource.backend_choice.name

    assert chosen() == "duckdb"
    assert chosen(backend="spark") == "spark"
    assert chosen(engine="spark") == "spark"
    assert chosen(backend="spark", engine="duckdb") == "spark"
