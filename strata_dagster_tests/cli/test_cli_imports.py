"""`strata --help` and every `strata CMD --help` import click and the command modules alone: no
engine, warehouse, language, DuckDB, sqlglot, lark or rich (each command imports what it runs when
it runs). The STRATA_* checks the group makes still precede every command's body."""

import json
import os
import subprocess
import sys

import click
import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main

# Every `--help` of the command line in one fresh interpreter; prints what it imported.
HELP_EVERYWHERE = """
import contextlib, io, json, sys

before = set(sys.modules)
import click
from strata_dagster.cli.main import main

def paths(command, path):
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from paths(sub, [*path, name])

shown = {}
for path in paths(main, []):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main.main(args=[*path, "--help"], prog_name="strata", standalone_mode=False)
    shown[" ".join([*path, "--help"])] = (code, out.getvalue()[:40])
print(json.dumps({"shown": shown, "imported": sorted(set(sys.modules) - before)}))
"""

HEAVY = ("duckdb", "sqlglot", "lark", "dagster", "polars", "pandas", "pyarrow", "rich", "pyspark", "numpy")
# The layers a command's body imports; its help needs none of them.
BODY_LAYERS = (
    "engine",
    "warehouse",
    "backends",
    "language",
    "compile",
    "state",
    "sql",
    "spark",
    "fingerprint",
)


@pytest.fixture(scope="module")
def help_run():
    done = subprocess.run(
        [sys.executable, "-c", HELP_EVERYWHERE], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout)


def test_every_help_is_shown(help_run):
    shown = help_run["shown"]
    assert {"--help", "run --help", "branch create --help", "sample-data --help"} <= set(shown)
    for args, (code, start) in shown.items():
        assert code == 0 and start.startswith("Usage: strata"), (args, code, start)


def test_help_imports_nothing_heavy(help_run):
    imported = help_run["imported"]
    heavy = [name for name in imported if name.split(".")[0] in HEAVY]
    layers = [
        name for name in imported if name.split(".")[:2][-1] in BODY_LAYERS and name.startswith("strata")
    ]
    assert not heavy and not layers, (heavy, layers)


def test_help_imports_click_and_the_standard_library_alone(help_run):
    """Any other third-party package the help would import is a start-up cost of every command."""
    allowed = {*sys.stdlib_module_names, "click", "strata_dagster"}
    others = sorted({name.split(".")[0] for name in help_run["imported"]} - allowed)
    assert others == [], others


def test_the_command_line_imports_no_json():
    """Only the --json output of some commands writes JSON (the fixture's script imports json)."""
    script = "import sys; from strata_dagster.cli.main import main; print('json' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == "False"


def leaf_commands(command: click.Command, path: tuple[str, ...] = ()):
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from leaf_commands(sub, (*path, name))
    else:
        yield path, command


LEAVES = dict(leaf_commands(main))


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_every_command_checks_the_strata_variables_before_its_body(path, tmp_path):
    """The group's checks run as each command's body starts (after its arguments are read)."""
    arguments = [
        str(tmp_path / "nowhere") if param.name == "project" else "x"
        for param in LEAVES[path].params
        if isinstance(param, click.Argument)
    ]
    result = CliRunner().invoke(main, [*path, *arguments], env={"STRATA_SERVING_GRACE": "abc"})
    assert result.exit_code == 1, result.output
    assert "error[E034]" in result.output and "STRATA_SERVING_GRACE" in result.output, result.output


def test_a_command_help_is_shown_whatever_the_strata_variables(tmp_path):
    for env in ({"STRATA_ENGINE": "oracle"}, {"STRATA_MEMORY_LIMIT": "lots"}):
        result = CliRunner().invoke(main, ["run", "--help"], env=env, prog_name="strata")
        assert result.exit_code == 0 and result.output.startswith("Usage: strata run"), result.output
    result = CliRunner().invoke(main, ["run", str(tmp_path)], env={"STRATA_ENGINE": "oracle"})
    assert result.exit_code == 1 and "error[E071]" in result.output, result.output


# A no-change `strata run --only-stale` in one fresh interpreter; prints what it imported.
NO_CHANGE_RUN = """
import json, sys
from strata_dagster.cli.main import main
code = main.main(args=sys.argv[1:], prog_name="strata", standalone_mode=False)
print(json.dumps({"code": code, "imported": sorted(sys.modules)}))
"""
# What a run that finds nothing to do never needs: the parser's grammar library (its modules come
# from the parse cache), data frames, Dagster (no DAGSTER_HOME), Spark, rich (its lines are plain),
# sqlglot's DuckDB dialect (its statements' renderings are kept beside the warehouse), and, of its
# own and sqlglot's modules, the build strategies and the incremental machinery they share, the
# publication (Iceberg's too), the serving catalog's planning, partitions asked for by name,
# model selectors, business-versioned and log sources' readers, the Spark dialect's rewrites and
# column lineage.
NOT_FOR_NO_CHANGE = ("lark", "polars", "pandas", "pyarrow", "numpy", "dagster", "pyspark", "rich")
NOT_FOR_NO_CHANGE_MODULES = (
    "strata_dagster.engine.decisions.dispatch",
    "strata_dagster.engine.builds.full",
    "strata_dagster.engine.builds.aggregate_delta",
    "strata_dagster.engine.builds.window",
    "strata_dagster.engine.builds.sliding_window",
    "strata_dagster.engine.builds.business_delta",
    "strata_dagster.engine.builds.strategy",
    "strata_dagster.engine.builds.incremental",
    "strata_dagster.engine.builds.segment",
    "strata_dagster.engine.builds.segment_compaction",
    "strata_dagster.engine.builds.joined_inputs",
    "strata_dagster.engine.builds.partition_range",
    "strata_dagster.engine.builds.partition_bounds",
    "strata_dagster.engine.publish",
    "strata_dagster.engine.iceberg_publication",
    "strata_dagster.engine.sources.business",
    "strata_dagster.engine.sources.feed",
    "strata_dagster.engine.sources.ledger",
    "strata_dagster.backends.duckdb.serving_catalog",
    "strata_dagster.backends.duckdb.partition_evidence",
    "strata_dagster.language.properties",
    "strata_dagster.language.selection",
    "strata_dagster.backends.spark",
    "strata_dagster.backends.dialect_check",
    "sqlglot.lineage",
    "sqlglot.optimizer.qualify",
    "sqlglot.dialects.duckdb",
    "sqlglot.generators.duckdb",
    "concurrent.futures",
)


def test_a_no_change_run_imports_neither_the_parser_nor_data_frames(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.strata").write_text("source orders { table: raw.orders }\nmodel copy {\n  from orders\n}\n")
    warehouse = tmp_path / "w.duckdb"
    con = duckdb.connect(str(warehouse))
    con.execute("CREATE SCHEMA raw; CREATE TABLE raw.orders AS SELECT range AS id FROM range(5)")
    con.close()
    arguments = ["run", str(project), "--warehouse", str(warehouse), "--only-stale"]
    env = {name: value for name, value in os.environ.items() if name != "DAGSTER_HOME"}
    # The first builds (and keeps the parsed modules and the compile), the second finds nothing
    # to do (and keeps its renderings), the third renders nothing.
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", NO_CHANGE_RUN, *arguments],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
    assert "nothing to do" in done.stdout
    imported = json.loads(done.stdout.splitlines()[-1])["imported"]
    assert not [name for name in imported if name.split(".")[0] in NOT_FOR_NO_CHANGE]
    assert not [name for name in imported if name.startswith(NOT_FOR_NO_CHANGE_MODULES)]
