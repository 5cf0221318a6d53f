"""DuckDB's memory and spill limits: bounded by default, set by env or CLI, exceeded as E033."""

import os
import subprocess
import sys

import duckdb
import pytest

from strata_dagster.backends.duckdb.connection import connect
from strata_dagster.backends.duckdb.limits import MAX_TEMP_SIZE_ENV, MEMORY_LIMIT_ENV, TEMP_DIRECTORY_ENV
from strata_dagster.engine.run import run_project
from strata_dagster.errors import E_RESOURCE_LIMIT, StrataError
from strata_dagster_tests.support.engine_support import execute, make_module_project, snapshot_relations

STRATA = [sys.executable, "-m", "strata_dagster.cli.main"]
SPILLING = """
source nums { table: raw.nums }
model sorted_hashes {
  from nums
  group h
  aggregate n = count(*), total = sum(i)
}
"""
HUGE_STRING = """
source nums { table: raw.nums }
model huge {
  from nums
  filter i = 0
  derive x = repeat('x', 200000000)
}
"""


def strata(*args, env=None):
    environment = {**os.environ, **(env or {})}
    return subprocess.run([*STRATA, *args], env=environment, capture_output=True, text=True)


def folder_bytes(folder):
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.exists() else 0


def published(warehouse):
    views = execute(
        warehouse, "SELECT count(*) FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal"
    )
    return views[0][0] + len(snapshot_relations(warehouse))


def test_defaults_bound_memory_and_spill(tmp_path, monkeypatch):
    for name in (MEMORY_LIMIT_ENV, MAX_TEMP_SIZE_ENV, TEMP_DIRECTORY_ENV):
        monkeypatch.delenv(name, raising=False)
    warehouse = tmp_path / "w.duckdb"
    with connect(warehouse) as con:
        memory, temp_size, folder = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('max_temp_directory_size'), "
            "current_setting('temp_directory')"
        ).fetchone()
    assert folder == str(tmp_path / "w.duckdb.tmp")
    gib = {"GiB": 1, "MiB": 1 / 1024}
    assert float(temp_size.split()[0]) * gib[temp_size.split()[1]] <= 16
    assert memory.endswith("GiB") or memory.endswith("MiB")


def test_a_spilling_model_past_its_limits_fails_with_e033_and_publishes_nothing(tmp_path, monkeypatch):
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        SPILLING,
        "CREATE TABLE raw.nums AS SELECT i, md5(i::varchar) AS h FROM range(2000000) t(i)",
    )
    spill = tmp_path / "spill"
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "64MB")
    monkeypatch.setenv(MAX_TEMP_SIZE_ENV, "32MB")
    monkeypatch.setenv(TEMP_DIRECTORY_ENV, str(spill))
    with pytest.raises(StrataError) as raised:
        run_project(project, warehouse)
    assert raised.value.code == E_RESOURCE_LIMIT
    assert raised.value.subject == "sorted_hashes"
    assert MAX_TEMP_SIZE_ENV in raised.value.render() or MEMORY_LIMIT_ENV in raised.value.render()
    assert published(warehouse) == 0
    assert folder_bytes(spill) <= 32 * 1024**2
    # Given room, the same model builds.
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1GB")
    monkeypatch.setenv(MAX_TEMP_SIZE_ENV, "1GB")
    run_project(project, warehouse)
    assert execute(warehouse, "SELECT count(*) FROM main.v_sorted_hashes") == [(2000000,)]


def test_the_cli_limit_names_the_model_and_the_setting(tmp_path):
    project, warehouse = make_module_project(
        tmp_path, "m.strata", HUGE_STRING, "CREATE TABLE raw.nums AS SELECT range AS i FROM range(10)"
    )
    result = strata(
        "--memory-limit",
        "64MB",
        "--max-temp-size",
        "32MB",
        "run",
        str(project),
        "--warehouse",
        str(warehouse),
    )
    assert result.returncode == 1, result.stderr
    assert f"error[{E_RESOURCE_LIMIT}]" in result.stderr and "Traceback" not in result.stderr
    assert "`huge`" in result.stderr and MEMORY_LIMIT_ENV in result.stderr
    assert published(warehouse) == 0


@pytest.mark.parametrize(
    "args, env",
    [
        (("--memory-limit", "lots"), {}),
        (("--max-temp-size", "50%"), {}),
        (("--memory-limit", "-1GB"), {}),
        ((), {MEMORY_LIMIT_ENV: "0"}),
        ((), {MAX_TEMP_SIZE_ENV: "12 parsecs"}),
    ],
)
def test_invalid_limits_are_coded_errors(tmp_path, args, env):
    project, warehouse = make_module_project(
        tmp_path, "m.strata", HUGE_STRING, "CREATE TABLE raw.nums AS SELECT range AS i FROM range(10)"
    )
    result = strata(*args, "check", str(project), "--warehouse", str(warehouse), env=env)
    assert result.returncode == 1, result.stderr
    assert f"error[{E_RESOURCE_LIMIT}]" in result.stderr and "Traceback" not in result.stderr


def test_a_run_beside_a_plain_connection_of_the_same_process_still_gets_the_limits(tmp_path, monkeypatch):
    project, warehouse = make_module_project(
        tmp_path, "m.strata", SPILLING, "CREATE TABLE raw.nums AS SELECT range AS i, 'h' AS h FROM range(10)"
    )
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "300MB")
    # A notebook's own connection, opened with DuckDB's defaults, stays open during the run.
    notebook = duckdb.connect(str(warehouse))
    try:
        run_project(project, warehouse)
        assert notebook.execute("SELECT n FROM main.v_sorted_hashes").fetchall() == [(10,)]
        limit = notebook.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert limit.endswith("MiB") and float(limit.split()[0]) < 300
    finally:
        notebook.close()


def test_running_out_of_memory_outside_a_build_is_e033_too(tmp_path):
    project, warehouse = make_module_project(
        tmp_path, "m.strata", SPILLING, "CREATE TABLE raw.nums AS SELECT range AS i, 'h' AS h FROM range(10)"
    )
    run_project(project, warehouse)
    result = strata("--memory-limit", "1MB", "gc", str(project), "--warehouse", str(warehouse), "--keep", "1")
    assert result.returncode == 1, result.stderr
    assert f"error[{E_RESOURCE_LIMIT}]" in result.stderr and MEMORY_LIMIT_ENV in result.stderr
    assert "Traceback" not in result.stderr
