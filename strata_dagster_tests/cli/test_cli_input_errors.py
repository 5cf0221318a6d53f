"""Mistakes on the command line are refused with their own code before anything is done or
announced, and summaries read well when piped: one line each, counts in the singular for one."""

import re

import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster_tests.support.engine_support import edit_module, history_count, make_shop

CREATES = "a new path creates an empty warehouse"


def invoke(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One built shop for the module: no test here changes what it publishes."""
    project, warehouse = make_shop(tmp_path_factory.mktemp("built"), rows=300)
    result = invoke("run", project, "--warehouse", warehouse)
    assert result.exit_code == 0, result.output
    return project, warehouse


def test_an_empty_selection_is_refused_by_every_command(built):
    """`--models ''` or `','` is no way to say "all", nor `--partitions ''` "none"."""
    project, warehouse = built
    runs = history_count(warehouse)
    wh = ["--warehouse", warehouse]
    commands = {
        "run": ["run", project, *wh],
        "verify": ["verify", project, *wh],
        "test": ["test", project, *wh],
        "backfill": ["backfill", project, "deadbeefdead", *wh, "--reason", "r"],
    }
    for name, command in commands.items():
        # A backfill reports every error as E085, the cause's own code in the message.
        models, partitions = (
            ("error[E085]: backfill cannot start (E025)", "error[E085]: backfill cannot start (E040)")
            if name == "backfill"
            else ("error[E025]", "error[E040]")
        )
        for empty in ("", ",", " , "):
            result = invoke(*command, "--models", empty)
            assert result.exit_code == 1 and models in result.output, (name, empty, result.output)
            assert "names no model" in result.output
            if name != "test":
                result = invoke(*command, "--partitions", empty)
                assert result.exit_code == 1 and partitions in result.output, (name, empty, result.output)
                assert "names no partition" in result.output
    for empty in ("", ","):
        result = invoke("compile", project, *wh, "--model", empty)
        assert result.exit_code == 1 and "error[E025]" in result.output, result.output
    assert history_count(warehouse) == runs
    assert "Traceback" not in invoke("run", project, *wh, "--models", ",").output


def test_verify_partitions_take_runs_checks_and_say_partition(built):
    project, warehouse = built
    future = invoke("verify", project, "--warehouse", warehouse, "--partitions", "2099-01-01")
    assert future.exit_code == 1 and "error[E040]" in future.output and "in the future" in future.output
    unpartitioned = invoke(
        "verify", project, "--warehouse", warehouse, "--models", "stg_orders", "--partitions", "2025-01-05"
    )
    assert unpartitioned.exit_code == 1 and "error[E040]" in unpartitioned.output
    one = invoke("verify", project, "--warehouse", warehouse, "--partitions", "2025-01-05")
    assert one.exit_code == 0, one.output
    assert re.search(r"\b1 partition\b(?!s)", one.output) and "1 partitions" not in one.output
    assert "verify: 1 model equal to a full rebuild" in one.output


def test_strata_test_refuses_a_given_warehouse_that_does_not_exist(tmp_path):
    project, _ = make_shop(tmp_path, rows=10)
    typo = tmp_path / "typo.duckdb"
    result = invoke("test", project, "--warehouse", typo)
    assert result.exit_code == 1 and "error[E020]" in result.output, result.output
    assert "does not exist" in result.output and "E063" not in result.output
    assert not typo.exists()


@pytest.mark.parametrize(
    "command", [["history"], ["verify"], ["gc", "--keep", "1"], ["replay", "deadbeefdead"], ["test"]]
)
def test_commands_that_never_create_a_warehouse_do_not_say_they_would(tmp_path, command):
    project, _ = make_shop(tmp_path, rows=10)
    broken = tmp_path / "broken.duckdb"
    broken.write_text("not a DuckDB file")
    name, *rest = command
    result = invoke(name, project, *rest, "--warehouse", broken)
    assert result.exit_code == 1 and "error[E020]" in result.output, result.output
    assert CREATES not in result.output


def test_run_still_says_a_new_path_creates_a_warehouse(tmp_path):
    project, _ = make_shop(tmp_path, rows=10)
    broken = tmp_path / "broken.duckdb"
    broken.write_text("not a DuckDB file")
    result = invoke("run", project, "--warehouse", broken)
    assert result.exit_code == 1 and "error[E020]" in result.output and CREATES in result.output


def test_a_run_on_a_mistyped_warehouse_creates_nothing(tmp_path):
    """The shop reads `raw.orders` from its warehouse: a path where no warehouse exists is a typo,
    refused before an empty warehouse (or its folder) is made."""
    project, _ = make_shop(tmp_path, rows=10)
    typo = tmp_path / "wharehouse" / "warehouse.duckdb"
    result = invoke("run", project, "--warehouse", typo)
    assert result.exit_code == 1 and "error[E020]" in result.output, result.output
    assert "source `orders` reads `raw.orders` from it: nothing was created" in result.output
    assert "sources.strata:8:8" in result.output and "strata sample-data" in result.output
    assert not typo.parent.exists()
    only_customers = invoke("run", project, "--warehouse", typo, "--models", "stg_customers")
    assert "source `customers` reads `raw.customers`" in only_customers.output, only_customers.output
    assert not typo.parent.exists()


def test_a_project_of_file_sources_still_starts_a_new_warehouse(tmp_path):
    project = tmp_path / "files"
    project.mkdir()
    (project / "orders.csv").write_text("order_id,amount\n1,10\n2,5\n")
    (project / "models.strata").write_text(
        "source orders {\n  path: 'orders.csv'\n}\n\n"
        "model big_orders {\n  from orders\n  filter amount > 6\n}\n"
    )
    warehouse = tmp_path / "new" / "warehouse.duckdb"
    result = invoke("run", project, "--warehouse", warehouse)
    assert result.exit_code == 0, result.output
    assert warehouse.exists() and history_count(warehouse) == 1


def test_an_invalid_branch_is_refused_before_the_banner(built):
    project, warehouse = built
    result = invoke("run", project, "--warehouse", warehouse, "--branch", "1bad")
    assert result.exit_code == 1 and "error[E026]" in result.output
    assert "strata run on branch" not in result.output, result.output


def test_summary_lines_do_not_wrap_when_piped(tmp_path, built):
    project, warehouse = built
    deep = tmp_path / ("a_rather_long_folder_name_" * 3) / "sample_warehouse_with_a_long_name.duckdb"
    written = invoke("sample-data", project, "--warehouse", deep, "--rows", "1")
    assert written.exit_code == 0, written.output
    lines = written.output.splitlines()
    assert len(lines) == 1 and lines[0].endswith("raw.orders: 1 row"), written.output
    swept = invoke("gc", project, "--warehouse", warehouse, "--keep", "1")
    assert swept.exit_code == 0, swept.output
    summary = [line for line in swept.output.splitlines() if line.startswith("dropped ")]
    assert len(summary) == 1 and "kept the snapshots of 1 run;" in summary[0], swept.output
    assert summary[0].endswith("back to the disk)"), swept.output


def test_a_new_warehouse_is_not_created_for_a_file_source_that_cannot_be_read(tmp_path):
    """A mistyped `path:` on a warehouse path that does not exist yet: E012 naming the pattern, a
    hint about `path:`, and no warehouse (or folder) left behind. The same source on an existing
    warehouse gets the same hint, not the table sources' one."""
    project = tmp_path / "files"
    project.mkdir()
    (project / "orders.csv").write_text("order_id,amount\n1,10\n2,5\n")
    (project / "models.strata").write_text(
        "source orders {\n  path: 'order.csv'\n}\n\nmodel big_orders {\n  from orders\n  filter amount > 6\n}\n"
    )
    warehouse = tmp_path / "new" / "warehouse.duckdb"
    result = invoke("run", project, "--warehouse", warehouse)
    assert result.exit_code == 1 and "error[E012]: source `orders` cannot be read" in result.output, (
        result.output
    )
    assert "order.csv" in result.output and "nothing was created" in result.output
    assert "models.strata:1:8" in result.output and "fix `path:`" in result.output
    assert not warehouse.parent.exists()

    edit_module(project / "models.strata", "'order.csv'", "'orders.csv'")
    assert invoke("run", project, "--warehouse", warehouse).exit_code == 0
    (project / "orders.csv").unlink()
    result = invoke("run", project, "--warehouse", warehouse)
    assert result.exit_code == 1 and "error[E012]" in result.output and "fix `path:`" in result.output
    assert "load the table first" not in result.output
