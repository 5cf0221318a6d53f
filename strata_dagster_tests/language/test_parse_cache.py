"""The parsed-module cache beside the warehouse (language/parse_cache.py): a run of an unchanged
project reads its modules from it without the parser; a changed, damaged, foreign or
unprotected cache is ignored, never believed; errors are never cached; `strata gc` prunes it."""

import io
import json
import marshal
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project, parse_cache
from strata_dagster_tests.support.engine_support import built_with_caches

MODULE = """
source orders { table: raw.orders }

model big_orders {
  from orders
  filter amount > 10
  select id, amount
}
"""

# Loads the project in a fresh interpreter; says whether the parser was imported.
LOAD = """
import json, sys
from pathlib import Path
from strata_dagster.language import load_project
project = load_project(Path(sys.argv[1]), Path(sys.argv[2]))
print(json.dumps({"models": sorted(project.models), "parsed": "lark" in sys.modules}))
"""


@pytest.fixture
def built(tmp_path):
    return built_with_caches(tmp_path, MODULE)


def load_in_process(project: Path, cache_dir: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(project), str(cache_dir)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def cache_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.cache")) if cache_dir.is_dir() else []


def test_an_unchanged_project_is_read_from_the_cache_without_the_parser(built):
    project, _, cache_dir = built
    assert len(cache_files(cache_dir)) == 1  # written by the run
    assert load_in_process(project, cache_dir) == {"models": ["big_orders"], "parsed": False}


def test_the_cached_project_is_the_parsed_one(built):
    project, _, cache_dir = built
    cached = load_project(project, cache_dir)
    parsed = load_project(project)
    assert cached.models == parsed.models and cached.sources == parsed.sources
    assert [str(e.node) for m in cached.models.values() for s in m.steps for e in _exprs(s)] == [
        str(e.node) for m in parsed.models.values() for s in m.steps for e in _exprs(s)
    ]


def _exprs(step):
    for value in vars(step).values():
        for item in value if isinstance(value, tuple) else (value,):
            if hasattr(item, "node"):
                yield item


def test_a_changed_module_is_parsed_again(built):
    project, _, cache_dir = built
    (project / "m.strata").write_text(MODULE + "\nmodel all_orders {\n  from orders\n}\n")
    assert load_in_process(project, cache_dir) == {"models": ["all_orders", "big_orders"], "parsed": True}


def test_a_damaged_cache_is_ignored_and_written_again(built):
    project, warehouse, cache_dir = built
    (file,) = cache_files(cache_dir)
    for damage in (b"", b"not a cache", file.read_bytes()[:-40]):
        file.write_bytes(damage)
        assert load_in_process(project, cache_dir) == {"models": ["big_orders"], "parsed": True}
        run_project(project, warehouse, only_stale=True)  # writes it again
        assert load_in_process(project, cache_dir)["parsed"] is False


class _Runs:
    """A pickle that, if loaded by a plain unpickler, runs a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _forged(file: Path, payload: bytes) -> None:
    _, folder, key, _ = marshal.loads(file.read_bytes())
    file.write_bytes(marshal.dumps((1, folder, key, payload)))


def test_a_cache_naming_anything_but_parsed_modules_is_never_loaded(built, tmp_path):
    project, _, cache_dir = built
    (file,) = cache_files(cache_dir)
    witness = tmp_path / "witness"
    # A pickle calling a function, and one smuggling it through sqlglot's expression loader.
    sqlglot_load = pickle.dumps(_SqlglotPayload([{"c": "os.getcwd"}]))
    for payload in (pickle.dumps([_Runs(f"touch {witness}")]), sqlglot_load):
        _forged(file, payload)
        assert load_in_process(project, cache_dir) == {"models": ["big_orders"], "parsed": True}
        assert not witness.exists()


class _SqlglotPayload:
    def __init__(self, payloads):
        self.payloads = payloads

    def __reduce__(self):
        from sqlglot.serde import load

        return (load, (self.payloads,))


def test_a_cache_others_may_write_is_ignored(built):
    project, _, cache_dir = built
    (file,) = cache_files(cache_dir)
    os.chmod(file, 0o666)
    assert load_in_process(project, cache_dir)["parsed"] is True
    os.chmod(file, 0o644)
    os.chmod(cache_dir, 0o777)
    assert load_in_process(project, cache_dir)["parsed"] is True
    os.chmod(cache_dir, 0o755)
    assert load_in_process(project, cache_dir)["parsed"] is False


def test_a_module_with_an_error_is_never_cached(built):
    project, _, cache_dir = built
    good = (project / "m.strata").read_text()
    (project / "m.strata").write_text(good.replace("filter amount > 10", "filter amount >"))
    for _ in range(2):
        with pytest.raises(StrataError) as caught:
            load_project(project, cache_dir)
        assert caught.value.code == "E002"  # the expression does not parse
    (project / "m.strata").write_text(good)
    assert sorted(load_project(project, cache_dir).models) == ["big_orders"]


def test_nothing_is_cached_beside_a_warehouse_that_does_not_exist(tmp_path, built):
    project, _, _ = built
    missing = parse_cache.cache_dir_of(tmp_path / "typo.duckdb")
    load_project(project, missing)
    assert not missing.exists()


def test_gc_removes_the_cache_of_a_project_folder_that_is_gone(built, tmp_path):
    project, warehouse, cache_dir = built
    other = tmp_path / "other"
    other.mkdir()
    (other / "m.strata").write_text(MODULE)
    load_project(other, cache_dir)
    assert len(cache_files(cache_dir)) == 2
    (other / "m.strata").unlink()
    other.rmdir()
    assert gc(warehouse, keep=1).parsed_removed == 1
    assert len(cache_files(cache_dir)) == 1
    assert load_in_process(project, cache_dir)["parsed"] is False


def test_a_copied_pickle_payload_is_what_the_unpickler_accepts(built):
    """The guard does not refuse what the cache itself writes (every class it names is allowed)."""
    _, _, cache_dir = built
    (file,) = cache_files(cache_dir)
    payload = marshal.loads(file.read_bytes())[3]
    modules = parse_cache._Unpickler(io.BytesIO(payload)).load()
    assert [module.path.name for module in modules] == ["m.strata"]
