"""The compiled project kept beside the warehouse (compile/compile_cache.py): a run of an unchanged
project over unchanged sources compiles nothing, and what it reads is what a compile gives; a
changed module, source property or source column compiles again; a damaged, foreign or forged
file is ignored and written again, never believed; `strata gc` prunes it with the parsed modules."""

import marshal
import os
import pickle

import pytest

import strata_dagster.compile.compile_cache as compile_cache
from strata_dagster.compile import compile_project
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster.language import load_project
from strata_dagster_tests.support.engine_support import built_with_caches, execute

MODULE = """
source orders { table: raw.orders }

model big_orders {
  from orders
  filter amount > 10
  select id, amount, random() as noise
}

model totals {
  from big_orders
  group id
  aggregate total = sum(amount)
}
"""
SCHEMAS = {"orders": (("id", "BIGINT"), ("amount", "BIGINT"))}


@pytest.fixture
def built(tmp_path):
    return built_with_caches(tmp_path, MODULE)


@pytest.fixture
def compiles(monkeypatch):
    """How many times the cache compiled instead of reading what it kept."""
    calls = []

    def counted(*args):
        calls.append(args)
        return compile_project(*args)

    monkeypatch.setattr(compile_cache, "compile_project", counted)
    return calls


def kept(project, cache_dir, schemas=SCHEMAS):
    return compile_cache.compiled_project(load_project(project, cache_dir), schemas, cache_dir)


def compiled_file(cache_dir):
    (file,) = cache_dir.glob("*.compiled")
    return file


def test_a_kept_compile_is_what_a_compile_gives(built, compiles):
    project, _, cache_dir = built
    again = kept(project, cache_dir)  # the run kept it, for these same columns
    assert compiles == []  # read, not compiled
    fresh = compile_project(load_project(project), SCHEMAS)
    assert again.models == fresh.models
    assert {name: model.statement.sql("duckdb") for name, model in again.models.items()} == {
        name: model.statement.sql("duckdb") for name, model in fresh.models.items()
    }
    assert again.warnings == fresh.warnings and again.warnings  # random() warns, kept or not
    assert again.project is not fresh.project and list(again.models) == list(again.project.order)


def test_a_changed_module_or_source_property_compiles_again(built, compiles):
    project, _, cache_dir = built
    kept(project, cache_dir)
    module = project / "m.strata"
    module.write_text(MODULE.replace("amount > 10", "amount > 20"))
    assert "20" in kept(project, cache_dir).models["big_orders"].statement.sql()
    module.write_text(
        MODULE.replace("{ table: raw.orders }", "{\n  table: raw.orders\n  versioning: cdc(id)\n}")
    )
    assert kept(project, cache_dir).project.sources["orders"].versioning.kind == "cdc"
    assert len(compiles) == 2


def test_changed_source_columns_compile_again(built, compiles):
    project, _, cache_dir = built
    kept(project, cache_dir)
    wider = {"orders": (*SCHEMAS["orders"], ("note", "VARCHAR"))}
    kept(project, cache_dir, wider)
    kept(project, cache_dir, {"orders": (("id", "BIGINT"), ("amount", "DOUBLE"))})
    assert len(compiles) == 2


def test_a_damaged_file_is_ignored_and_written_again(built, compiles):
    project, _, cache_dir = built
    kept(project, cache_dir)
    file = compiled_file(cache_dir)
    good = file.read_bytes()
    for count, damage in enumerate((b"", b"not a cache", good[:-40], marshal.dumps((1, "x", "y", b"z"))), 1):
        file.write_bytes(damage)
        assert kept(project, cache_dir).models["totals"].name == "totals"
        assert len(compiles) == count  # compiled, and kept again:
        kept(project, cache_dir)
        assert len(compiles) == count


class _Runs:
    """A pickle that, if loaded by a plain unpickler, runs a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_forged_or_unprotected_file_is_never_believed(built, compiles, tmp_path):
    project, _, cache_dir = built
    kept(project, cache_dir)
    file = compiled_file(cache_dir)
    _, folder, key, payload = marshal.loads(file.read_bytes())
    witness = tmp_path / "witness"
    for forged in (pickle.dumps(({"big_orders": _Runs(f"touch {witness}")}, ())), pickle.dumps(({}, ()))):
        file.write_bytes(marshal.dumps((1, folder, key, forged)))
        kept(project, cache_dir)
        assert not witness.exists()
    assert len(compiles) == 2
    os.chmod(file, 0o666)
    kept(project, cache_dir)
    assert len(compiles) == 3


def test_no_cache_dir_keeps_nothing(built, compiles):
    project, _, cache_dir = built
    for _ in range(2):
        compile_cache.compiled_project(load_project(project), SCHEMAS, None)
    assert len(compiles) == 2


def test_a_run_reads_the_kept_compile_and_gc_prunes_it(built, compiles, tmp_path):
    project, warehouse, cache_dir = built
    assert compiled_file(cache_dir).exists()  # kept by the run
    run_project(project, warehouse, only_stale=True)
    assert compiles == []
    execute(warehouse, "ALTER TABLE raw.orders ADD COLUMN note VARCHAR")
    run_project(project, warehouse, only_stale=True)
    assert len(compiles) == 1  # the source's columns changed
    other = tmp_path / "other"
    other.mkdir()
    (other / "m.strata").write_text(MODULE)
    kept(other, cache_dir)
    assert len(list(cache_dir.glob("*.compiled"))) == 2
    (other / "m.strata").unlink()
    other.rmdir()
    assert gc(warehouse, keep=1).parsed_removed == 2  # its parsed modules and its compile
    assert len(list(cache_dir.glob("*.compiled"))) == 1
