"""What the linters cannot see, read from the repository's own text: no import cycle among the
package's modules, no class of the engine subclassed outside its module, every `type: ignore` names its error code and says why (mypy only checks the
code), nothing cites a document outside the repository (its design is docs/architecture.md), and every
error code of the catalogue is named by a test."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_FOLDERS = ("strata_dagster", "strata_dagster_tests", "bench", "examples")

# Text files of the repository that could cite a document (not data, not generated output).
TEXT_SUFFIXES = (".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".strata", ".sh")
SKIPPED_FOLDERS = {"__pycache__", "build", "node_modules", "dagster_home"}
# The design documents the repository grew from, which a reader of it has never seen: their names
# (spelled here in parts, so that this file does not cite them), "seed 00x", and the folder beside
# the repository they lived in.
_OUTSIDE = re.compile(
    "|".join(
        [
            r"\b(?:"
            + "|".join(["ARCHITECTURE", "STYLE", "SPARK" + "_NOTES", "DAGSTER" + "_NOTES", "LANGUAGE"])
            + r")\.md\b",
            r"\b" + "SPARK" + r"_NOTES\b",
            r"\b[Ss]eeds? ?0\d\d\b",
            r"\.\./" + "shared",
        ]
    )
)

_IGNORE = re.compile(r"#\s*type:\s*ignore\b")
# An ignore with its codes in brackets, then a comment of its own that says why.
_EXPLAINED_IGNORE = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(?:,\s*[a-z0-9-]+)*\]\s+#\s*\S")


def _python_files() -> Iterator[Path]:
    for folder in PYTHON_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def unexplained_ignores(source: str) -> list[int]:
    """Lines of `source` whose comment ignores a type error without a code or without a reason."""
    lines = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and _IGNORE.search(token.string):
            if not _EXPLAINED_IGNORE.search(token.string):
                lines.append(token.start[0])
    return lines


def test_unexplained_ignores_are_found() -> None:
    source = (
        "a = 1  # type: ignore\n"
        "b = 2  # type: ignore[assignment]\n"
        "c = 3  # type: ignore[assignment]  # a sentinel\n"
        "d = 4  # type: ignore[arg-type, misc]  # validated above\n"
        'e = "# type: ignore"\n'
    )
    assert unexplained_ignores(source) == [1, 2]


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    found = []
    for path in _python_files():
        relative = path.relative_to(ROOT).as_posix()
        found += [f"{relative}:{line}" for line in unexplained_ignores(path.read_text())]
    assert found == [], "write `# type: ignore[code]  # why` (or fix the type):\n" + "\n".join(found)


def _text_files() -> Iterator[Path]:
    for folder, subfolders, files in os.walk(ROOT):
        # Hidden folders (.git, .venv, caches) hold nothing of the repository's own but .ci.
        subfolders[:] = sorted(
            name
            for name in subfolders
            if name not in SKIPPED_FOLDERS and (not name.startswith(".") or name == ".ci")
        )
        for name in sorted(files):
            path = Path(folder, name)
            if path.suffix in TEXT_SUFFIXES or path.relative_to(ROOT).as_posix() == ".ci/run":
                yield path


def outside_citations(text: str) -> list[int]:
    """Lines of `text` that cite a document outside the repository."""
    return [number for number, line in enumerate(text.splitlines(), 1) if _OUTSIDE.search(line)]


def test_outside_citations_are_found() -> None:
    text = "\n".join(
        [
            "see docs/architecture.md, R6",
            "(" + "ARCHITECTURE" + ".md, Layering)",
            "the rule of seed" + " 003",
            "../" + "shared/peer_bench",
            "what " + "SPARK" + "_NOTES measured",
            "docs/language.md; random seed 42",
        ]
    )
    assert outside_citations(text) == [2, 3, 4, 5]


def test_nothing_cites_a_document_outside_the_repository() -> None:
    found = []
    for path in _text_files():
        relative = path.relative_to(ROOT).as_posix()
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{relative}:{line}" for line in outside_citations(text)]
    assert found == [], "cite docs/architecture.md (or the doc of this repository) instead:\n" + "\n".join(
        found
    )


def import_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a cycle (strongly connected, >1 module),
    each sorted, from `imports` (module -> the modules it imports)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in sorted(imports.get(module, ())):
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(imports):
        if module not in order:
            visit(module)
    return sorted(cycles)


def test_import_cycles_are_found() -> None:
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(imports) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", ["strata_dagster", "strata_dagster_tests"])
def test_no_module_imports_itself_round_a_cycle(package: str) -> None:
    """Also imports inside functions and under TYPE_CHECKING: a cycle broken by a local import is a
    cycle still (move the shared part down instead). The tests' support modules too."""
    graph = grimp.build_graph(package, cache_dir=None)
    imports = {
        module: {
            imported
            for imported in graph.find_modules_directly_imported_by(module)
            if imported in graph.modules
        }
        for module in graph.modules
    }
    cycles = import_cycles(imports)
    assert cycles == [], "modules that import each other round a cycle:\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


def subclassed_across_modules(package: Path, module_of: dict[Path, str]) -> list[str]:
    """Classes that derive from an engine class (`strata_dagster.engine.*`) defined in another
    module, or engine classes that derive from another module's class of strata_dagster (exceptions
    apart): a strategy composes what it shares, as documented hooks, rather than inheriting
    another module's private workings."""
    found = []
    for path, module in sorted(module_of.items()):
        tree = ast.parse(path.read_text())
        imported: dict[str, str] = {}  # a name bound by `from strata_dagster.x import Name` -> x
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("strata_dagster"):
                for alias in node.names:
                    imported[alias.asname or alias.name] = node.module or ""
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                name = base.id if isinstance(base, ast.Name) else None
                origin = imported.get(name or "")
                if origin is None or origin == module or (name or "").endswith(("Error", "Warning")):
                    continue
                if origin.startswith("strata_dagster.engine") or module.startswith("strata_dagster.engine"):
                    found.append(
                        f"{path.relative_to(package.parent).as_posix()}: {node.name}({origin}.{name})"
                    )
    return found


def test_no_engine_class_is_subclassed_outside_its_module() -> None:
    package = ROOT / "strata_dagster"
    module_of = {
        path: ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in package.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    found = subclassed_across_modules(package, module_of)
    assert found == [], "compose instead (or move the class beside its base):\n" + "\n".join(found)


# Dagster's private API: never imported, by any module of the package.
def _dagster_private_imports(text: str) -> dict[str, set[str]]:
    """The private Dagster modules (`dagster._...`, dagster-shared) a module imports, and the names."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(("dagster._", "dagster_shared")):
                    found.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            if module == "dagster" and any(alias.name.startswith("_") for alias in node.names):
                module = "dagster._"
            if module.startswith(("dagster._", "dagster_shared")):
                found.setdefault(module, set()).update(alias.name for alias in node.names)
    return found


def test_private_dagster_imports_are_found() -> None:
    text = (
        "import dagster._core\nfrom dagster import _check\nfrom dagster._core.events import EngineEventData\n"
    )
    assert _dagster_private_imports(text) == {
        "dagster._core": set(),
        "dagster._": {"_check"},
        "dagster._core.events": {"EngineEventData"},
    }
    assert _dagster_private_imports("import dagster as dg\nfrom dagster import AssetKey\n") == {}


def test_no_module_imports_dagsters_private_api() -> None:
    found = {}
    for path in sorted((ROOT / "strata_dagster").rglob("*.py")):
        imports = _dagster_private_imports(path.read_text())
        if imports:
            found[path.relative_to(ROOT).as_posix()] = imports
    assert found == {}, f"Dagster's private API imported (use its public API): {found}"


def test_every_engine_module_sits_in_a_layer_of_the_engine() -> None:
    """lint-imports checks the engine's layers only for the modules they name: a new module or
    folder of strata_dagster/engine must be given its layer (pyproject.toml) to be checked."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'containers = \["strata_dagster\.engine"\]\s*layers = \[(.*?)\n\]', text, re.S)
    assert found is not None, "pyproject.toml has no layers contract on strata_dagster.engine"
    layers = re.findall(r'"([^"]+)"', found.group(1))
    named = {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}
    engine = ROOT / "strata_dagster" / "engine"
    children = {
        path.stem if path.is_file() else path.name
        for path in engine.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").is_file()
    }
    assert sorted(children - named) == [], "give each its layer in pyproject.toml's engine contract"


# An error code as a test writes it out (`"E085"`, or inside a message it matches).
_CODE_TEXT = re.compile(r"\bE\d{3}\b")


def error_codes(errors_source: str) -> dict[str, str]:
    """The catalogue's codes: constant name -> code (`E_BACKFILL: Final = "E085"`)."""
    codes = {}
    for node in ast.parse(errors_source).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            value = node.value
            if (
                isinstance(target, ast.Name)
                and target.id.startswith("E_")
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                codes[target.id] = value.value
    return codes


def untested_codes(codes: dict[str, str], test_sources: list[str]) -> list[str]:
    """The codes no test names: neither its constant used in code (an import alone does not count)
    nor the code written in a string."""
    used: set[str] = set()
    for source in test_sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.update(_CODE_TEXT.findall(node.value))
    return sorted(f"{name} ({code})" for name, code in codes.items() if name not in used and code not in used)


def test_untested_codes_are_found() -> None:
    codes = error_codes('E_A: Final = "E001"\nE_B: Final = "E002"\nE_C = "E003"\nOTHER = "E004"\n')
    assert codes == {"E_A": "E001", "E_B": "E002", "E_C": "E003"}
    tests = [
        "from strata_dagster.errors import E_A, E_B\n",
        "def test_b():\n    assert error.code == E_B\n",
        "def test_c():\n    assert 'error[E003]' in output\n",
    ]
    assert untested_codes(codes, tests) == ["E_A (E001)"]


def test_every_error_code_is_asserted_by_some_test() -> None:
    """Every code a user can be shown is triggered by a test that names it (tests assert on codes,
    never on prose): a new code comes with its test."""
    codes = error_codes((ROOT / "strata_dagster" / "errors.py").read_text())
    assert len(codes) > 50, "errors.py's catalogue was not read"
    tests = [path.read_text() for path in sorted((ROOT / "strata_dagster_tests").rglob("*.py"))]
    missing = untested_codes(codes, tests)
    assert missing == [], "no test triggers these codes:\n" + "\n".join(missing)
