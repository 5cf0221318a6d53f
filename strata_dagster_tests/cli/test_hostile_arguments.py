"""Hostile arguments and settings, as a careless operator gives them: each is a coded error with a
hint, never a traceback, and nothing is written. Branch names that readers would confuse with a
schema or catalog, durations and sizes out of range, every STRATA_* variable checked, paths that
are no warehouse or no project."""

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import execute, history_count, make_shop, view_tables


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


# -- durations, sizes, counts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--older-than", "99999999999d"),
        ("--older-than", "36501d"),
        ("--older-than", "5215w"),
        ("--keep", "1", "--grace", "99999999999999999999w"),
        ("--older-than", "٣d"),  # an Arabic-Indic digit: no ASCII number
    ],
)
def test_gc_ages_beyond_a_century_or_not_in_ascii_digits_are_e034(built, args):
    project, warehouse = built
    before = warehouse_state(warehouse)
    assert_coded(cli("gc", project, "--warehouse", warehouse, *args), "E034")
    assert warehouse_state(warehouse) == before


def test_gc_takes_an_age_of_a_century(built):
    project, warehouse = built
    result = cli("gc", project, "--warehouse", warehouse, "--older-than", "36500d")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--memory-limit", "٣GB"),
        ("--memory-limit", "99999999999999999999999GB"),
        ("--memory-limit", "2PiB"),
        ("--memory-limit", "0MB"),
        ("--max-temp-size", "1e9GB"),
        ("--memory-limit", "1KB"),  # a size, too small to open the warehouse: E033, not E020
    ],
)
def test_a_limit_that_is_no_size_or_cannot_open_the_warehouse_is_e033(built, option, value):
    project, warehouse = built
    before = warehouse_state(warehouse)
    result = cli(option, value, "run", project, "--warehouse", warehouse)
    assert_coded(result, "E033")
    assert warehouse_state(warehouse) == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("gc", "{project}", "--keep", "-1"), "'--keep': -1 is not in the range"),
        (("show", "{project}", "daily_revenue", "--limit", str(2**70)), "'--limit'"),
        (("runn", "{project}"), "No such command 'runn'"),
        (("run", "{project}", "--only-stael"), "No such option '--only-stael'"),
        (("branch", "create", "{project}"), "Missing argument 'NAME'"),
        (("--temp-directory", "{warehouse}", "run", "{project}"), "is a file"),
    ],
)
def test_what_click_cannot_read_is_e074_with_exit_status_2(built, args, needle):
    project, warehouse = built
    result = cli(*(arg.format(project=project, warehouse=warehouse) for arg in args))
    assert_coded(result, "E074", exit_code=2)
    assert needle in result.output and "--help` lists what it takes" in result.output
    assert "Usage:" not in result.output


def test_a_group_alone_still_shows_its_help():
    for args in ((), ("branch",)):
        result = cli(*args)
        assert result.output.startswith("Usage: ") and "error[" not in result.output, result.output


def test_a_depth_in_other_digits_is_no_model_selector(built):
    project, warehouse = built
    result = cli("plan", project, "--warehouse", warehouse, "--models", "٢+daily_revenue")
    assert_coded(result, "E025")


# -- STRATA_* variables ---------------------------------------------------------------------------

FILE_NOT_FOLDER = "{warehouse}"  # an existing file where a folder is wanted
LONG = "a" * 5000


@pytest.mark.parametrize(
    ("variable", "value", "code"),
    [
        ("STRATA_LOCK_TIMEOUT", "٣", "E020"),
        ("STRATA_LOCK_TIMEOUT", "1_0", "E020"),
        ("STRATA_LOCK_TIMEOUT", "1e3", "E020"),
        ("STRATA_LOCK_TIMEOUT", "99999999999", "E020"),
        ("STRATA_LOCK_TIMEOUT", "-3", "E020"),
        ("STRATA_SERVING_GRACE", "abc", "E034"),
        ("STRATA_SERVING_GRACE", "٣", "E034"),
        ("STRATA_MEMORY_LIMIT", "٣GB", "E033"),
        ("STRATA_MEMORY_LIMIT", "lots", "E033"),
        ("STRATA_MAX_TEMP_SIZE", "99999999999999999999999GB", "E033"),
        ("STRATA_TEMP_DIRECTORY", FILE_NOT_FOLDER, "E033"),
        ("STRATA_TEMP_DIRECTORY", LONG, "E033"),
        ("STRATA_SNAPSHOT_STORAGE", "s3", "E037"),
        ("STRATA_BACKEND", "oracle", "E071"),
        ("STRATA_ENGINE", "oracle", "E071"),
        ("STRATA_WAREHOUSE", "/", "E020"),
        ("STRATA_WAREHOUSE", ".", "E020"),
        ("STRATA_WAREHOUSE", LONG, "E020"),
    ],
)
def test_every_strata_variable_is_checked_before_any_command_naming_it(built, variable, value, code):
    """Whichever command runs: `STRATA_SERVING_GRACE` is gc's, yet `strata run` refuses it too."""
    project, warehouse = built
    value = value.format(warehouse=warehouse)
    before = warehouse_state(warehouse)
    for args in (("run", project), ("history", project)):
        if variable != "STRATA_WAREHOUSE":
            args = (*args, "--warehouse", warehouse)
        result = cli(*args, env={variable: value})
        assert_coded(result, code)
        assert variable in result.output, result.output
    assert warehouse_state(warehouse) == before


def test_a_warehouse_folder_is_refused_before_anything_is_opened(built, tmp_path):
    project, warehouse = built
    result = cli("history", project, env={"STRATA_WAREHOUSE": str(tmp_path)})
    assert_coded(result, "E020")
    assert "is a folder, not a DuckDB file" in result.output and "STRATA_WAREHOUSE" in result.output
    assert list(tmp_path.iterdir()) == []


def test_numbers_in_ascii_digits_are_taken(built):
    project, warehouse = built
    env = {"STRATA_LOCK_TIMEOUT": " 2.5 ", "STRATA_SERVING_GRACE": "0", "STRATA_MEMORY_LIMIT": "1GiB"}
    assert cli("history", project, "--warehouse", warehouse, env=env).exit_code == 0


# -- paths ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "run", "history", "sample-data", "connect"])
def test_a_project_path_the_os_cannot_use_is_e013(command):
    result = cli(command, LONG)
    assert_coded(result, "E013")
    assert "5,000 bytes long" in result.output


def test_a_warehouse_path_the_os_cannot_use_is_e020(built):
    project, _ = built
    for command in ("run", "history", "connect"):
        result = cli(command, project, "--warehouse", "/tmp/" + "b" * 300 + ".duckdb")
        assert_coded(result, "E020")
        assert "307 bytes long (at most 255)" in result.output


def test_a_file_is_no_spark_warehouse_folder(built):
    """Refused before Spark starts (it used to end in mkdir's FileExistsError)."""
    pytest.importorskip("pyspark")
    project, warehouse = built
    result = cli("run", project, "--engine", "spark", "--warehouse", warehouse)
    assert_coded(result, "E020")
    assert "is a file, not a Spark warehouse folder" in result.output


def test_a_file_is_no_project_folder(built):
    _, warehouse = built
    result = cli("check", warehouse)
    assert_coded(result, "E013")
    assert "is a file, not a folder" in result.output


def test_the_root_folder_is_refused_as_a_project_without_walking_the_disk():
    """`strata check /` walked every file of the machine for 20 s, then died on a file that
    vanished meanwhile; now it stops at the first 100,000 entries."""
    result = cli("check", "/")
    assert_coded(result, "E013")
    assert "more than 100,000 files and folders" in result.output


def test_hidden_folders_are_not_part_of_the_project(tmp_path):
    """A `.venv` or `.git` inside a project folder is neither walked nor read for modules."""
    project, warehouse = make_shop(tmp_path, rows=10)
    hidden = project / ".venv" / "lib"
    hidden.mkdir(parents=True)
    (hidden / "broken.strata").write_text("model {")
    result = cli("check", project, "--warehouse", warehouse)
    assert result.exit_code == 0, result.output


# -- Ctrl-C ---------------------------------------------------------------------------------------

# A real SIGINT, delivered while the command line imports its dependencies (sqlglot here): where
# a person's Ctrl-C lands in the first second of a slow start.
INTERRUPTED_WHILE_IMPORTING = """
import os, signal, sys

class InterruptOnce:
    def find_spec(self, name, path=None, target=None):
        if name == "sqlglot":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptOnce())
sys.argv = ["strata", "check", "nowhere"]
from strata_dagster.cli.entry import run
run()
"""


def test_ctrl_c_while_the_command_line_imports_exits_130_with_one_line():
    (script,) = entry_points(group="console_scripts", name="strata")
    assert script.value == "strata_dagster.cli.entry:run"  # the console script is that function
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WHILE_IMPORTING], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted: nothing was done\n"


def test_the_dagster_definitions_check_every_strata_variable_where_they_load(built, monkeypatch):
    from strata_dagster import build_definitions

    project, warehouse = built
    for variable, value, code in (
        ("STRATA_SERVING_GRACE", "abc", "E034"),
        ("STRATA_LOCK_TIMEOUT", "٣", "E020"),
        ("STRATA_WAREHOUSE", "/", "E020"),
    ):
        with monkeypatch.context() as patched:
            patched.setenv(variable, value)
            with pytest.raises(StrataError) as caught:
                build_definitions(project)
        assert caught.value.code == code and variable in caught.value.message, caught.value


def test_a_folder_in_strata_warehouse_is_a_spark_warehouse_not_a_mistake(built, tmp_path):
    """The variable is judged for the command's engine, which `--engine` names after it is read."""
    pytest.importorskip("pyspark")
    project, _ = built
    result = cli("history", project, "--engine", "spark", env={"STRATA_WAREHOUSE": str(tmp_path)})
    assert "is a folder" not in result.output, result.output
    assert "Spark warehouse" in result.output, result.output


def test_a_nul_byte_in_a_path_is_a_coded_error_for_library_callers(tmp_path):
    """A shell cannot pass one, but a defs.yaml (`"\\0"`) or a Python caller can."""
    from strata_dagster.engine.run import run_project
    from strata_dagster.language import load_project

    with pytest.raises(StrataError) as caught:
        load_project(tmp_path / "sh\0p")
    assert caught.value.code == "E013" and "NUL byte" in caught.value.message
    project, _ = make_shop(tmp_path, rows=10)
    with pytest.raises(StrataError) as caught:
        run_project(project, tmp_path / "ware\0house.duckdb")
    assert caught.value.code == "E020" and "NUL byte" in caught.value.message


def test_a_link_loop_among_the_modules_is_named_and_a_dangling_link_is_no_module(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=10)
    (project / ".#staging.strata").symlink_to("user@host.1234")  # an editor's lock file: dangling
    assert cli("check", project, "--warehouse", warehouse).exit_code == 0
    (project / "loop.strata").symlink_to("loop.strata")
    result = cli("check", project, "--warehouse", warehouse)
    assert_coded(result, "E013")
    assert "loop.strata`: Too many levels of symbolic links" in result.output
