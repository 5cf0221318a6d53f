"""Hostile arguments and settings, as a careless operator gives them: each is a coded error with a
hint, never a traceback, and nothing is written. Branch names that readers would confuse with a
schema or catalog, durations and sizes out of range, every STRATA_* variable checked, paths that
are no warehouse or no project."""

import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster.errors import StrataError
from strata_dagster_tests.engine_support import execute, history_count, make_shop, view_tables


def cli(*args, env=None):
    return CliRunner().invoke(main, [str(arg) for arg in args], env=env)


def assert_coded(result, code, exit_code=1):
    assert result.exit_code == exit_code, result.output
    assert f"error[{code}]" in result.output, result.output
    assert "Traceback" not in result.output and "= help: " in result.output, result.output


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One built shop with a branch `dev`; no test here changes what it publishes."""
    project, warehouse = make_shop(tmp_path_factory.mktemp("built"), rows=300)
    assert cli("run", project, "--warehouse", warehouse).exit_code == 0
    assert cli("branch", "create", project, "dev", "--warehouse", warehouse).exit_code == 0
    return project, warehouse


def warehouse_state(warehouse):
    """What a refused command must leave as it was: the history, the views of every schema."""
    views = execute(
        warehouse, "SELECT schema_name, count(*) FROM duckdb_views() WHERE NOT internal GROUP BY 1"
    )
    return history_count(warehouse), sorted(views), view_tables(warehouse)


# -- branch names ---------------------------------------------------------------------------------

# Schemas of tables (the sources' `raw`, in any case), the catalog readers attach (`strata_live`),
# DuckDB's own catalogs and schemas, strata's own, and `main` in another case.
CONFUSING = (
    "RAW raw Raw strata_live STRATA_LIVE memory Memory system temp strata_serving strata __rel__ "
    "information_schema pg_catalog Main"
).split()


@pytest.mark.parametrize("name", CONFUSING)
def test_a_branch_named_like_a_schema_or_catalog_is_refused_by_every_command(built, name):
    project, warehouse = built
    before = warehouse_state(warehouse)
    wh = ("--warehouse", warehouse)
    for args in (
        ("branch", "create", project, name, *wh),
        ("run", project, "--branch", name, *wh),
        ("promote", project, "dev", "--to", name, *wh),
        ("show", project, "daily_revenue", "--branch", name, *wh),
        ("plan", project, "--branch", name, *wh),
    ):
        result = cli(*args)
        assert_coded(result, "E026")
        assert "strata run on branch" not in result.output  # refused before the banner
    assert warehouse_state(warehouse) == before


def test_a_schema_of_tables_is_refused_as_a_branch_whatever_its_case(built):
    """Not only the sources' schemas: any schema holding tables (a correction's `fixes`)."""
    project, warehouse = built
    execute(
        warehouse,
        "CREATE SCHEMA IF NOT EXISTS fixes; CREATE OR REPLACE TABLE fixes.customers AS SELECT 1 AS id",
    )
    before = warehouse_state(warehouse)
    for name in ("fixes", "FIXES"):
        result = cli("branch", "create", project, name, "--warehouse", warehouse)
        assert_coded(result, "E026")
        assert "holds tables" in result.output
    assert warehouse_state(warehouse) == before


def test_the_dagster_definitions_refuse_such_a_branch_where_they_load(built):
    from strata_dagster import StrataResource, build_definitions

    project, warehouse = built
    for name in ("RAW", "strata_live", "memory"):
        with pytest.raises(StrataError) as caught:
            build_definitions(project, warehouse=warehouse, branch=name)
        assert caught.value.code == "E026", caught.value
    with pytest.raises(ValueError, match="cannot be a branch name"):
        StrataResource(project_dir=str(project), warehouse=str(warehouse), branch="Memory")


def test_a_branch_made_before_its_name_was_reserved_can_still_be_deleted(built, tmp_path):
    """`branch delete` (and promote's source) check the spelling only, so an old warehouse with a
    branch `memory` can be cleaned up."""
    import shutil

    project, template = built
    warehouse = tmp_path / template.name
    shutil.copy(template, warehouse)
    # As an older strata wrote it: the branch's views and its publication rows.
    execute(
        warehouse,
        "CREATE SCHEMA memory",
        "CREATE VIEW memory.v_stg_orders AS SELECT * FROM main.v_stg_orders",
        "INSERT INTO strata.publications SELECT * REPLACE ('memory' AS branch) FROM strata.publications "
        "WHERE branch = 'dev' AND model = 'stg_orders'",
    )
    result = cli("branch", "delete", project, "memory", "--warehouse", warehouse)
    assert result.exit_code == 0, result.output
    assert execute(warehouse, "SELECT count(*) FROM duckdb_views() WHERE schema_name = 'memory'") == [(0,)]
