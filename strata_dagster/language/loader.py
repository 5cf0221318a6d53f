"""Load every `*.strata` module under a folder into one checked Project."""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from strata_dagster.errors import (
    E_CYCLE,
    E_DUPLICATE_NAME,
    E_PROJECT,
    E_UNKNOWN_RELATION,
    Location,
    StrataError,
    raise_collected,
)
from strata_dagster.language import parse_cache
from strata_dagster.language.definition import (
    FromStep,
    JoinStep,
    Model,
    Module,
    Project,
    SetOperationStep,
    Source,
)
from strata_dagster.language.fixtures import model_test_errors
from strata_dagster.paths import path_problem, shortened

MODULE_SUFFIX = ".strata"
# Files and folders a project folder may hold, all told: more is no project folder (`/`, a home).
MAX_PROJECT_ENTRIES = 100_000


def load_project(root: Path | str, cache_dir: Path | None = None) -> Project:
    """Parse and link every module under `root`. Raises StrataError on any mistake. `cache_dir`:
    where parsed modules are kept between processes (language.parse_cache), None for no cache."""
    folder = Path(root)
    if folder.suffix == MODULE_SUFFIX and path_problem(folder) is None and folder.is_file():
        folder = folder.parent
    paths = module_paths(folder)
    if not paths:
        raise StrataError(
            E_PROJECT, f"no `*{MODULE_SUFFIX}` modules under `{folder}`", hint="add a module file"
        )
    texts: list[tuple[Path, str]] = []
    errors: list[StrataError] = []
    digest = hashlib.sha256()
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            errors.append(StrataError(E_PROJECT, f"cannot read module: {error}", Location(str(path), 1, 1)))
            continue
        digest.update(f"{path.relative_to(folder).as_posix()}\0{len(text)}\0{text}".encode())
        texts.append((_display_path(path), text))
    raise_collected(errors)
    modules = _modules(folder, texts, cache_dir)
    return link_project(folder, modules, text_digest=digest.hexdigest())


# The modules last read from a cache, by key: frozen, as `_parsed`'s are.
_read_once: dict[str, list[Module]] = {}


def _modules(folder: Path, texts: list[tuple[Path, str]], cache_dir: Path | None) -> list[Module]:
    """Each module parsed, or as the cache kept it when it holds exactly these texts."""
    key = where = None
    if cache_dir is not None:
        where = Path(os.path.realpath(folder))
        key = parse_cache.cache_key([(str(shown), text) for shown, text in texts])
        cached = _read_once.get(key) or parse_cache.read(cache_dir, where, key)
        if cached is not None:
            _read_once.clear()  # the last project read: a CLI command loads it twice
            _read_once[key] = cached
            return cached
    modules: list[Module] = []
    errors: list[StrataError] = []
    for shown, text in texts:
        try:
            modules.append(_parsed(text, shown))
        except StrataError as error:
            errors.extend(error.errors)
    raise_collected(errors)
    if cache_dir is not None and where is not None and key is not None:
        parse_cache.write(cache_dir, where, key, modules)
    return modules


def module_paths(folder: Path) -> list[Path]:
    """The `*.strata` files under `folder`, sorted. Folders whose names start with a dot (`.git`,
    `.venv`) and links to folders are not entered. E013 for a folder that is missing, no folder,
    unreadable, or too large to be a project's (`strata check /` is refused within a second
    instead of walking the whole disk)."""
    problem = path_problem(folder)
    if problem is not None:
        raise StrataError(
            E_PROJECT,
            f"project folder `{shortened(folder)}` cannot be used: {problem}",
            hint="pass the folder that holds *.strata files",
        )
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise StrataError(
            E_PROJECT, f"project folder `{folder}` {what}", hint="pass the folder that holds *.strata files"
        )
    found: list[Path] = []
    unreadable: StrataError | None = None  # raised after the walk: "too large" says more
    seen = 0
    folders = [folder]
    while folders:
        current = folders.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_PROJECT_ENTRIES:
                        raise StrataError(
                            E_PROJECT,
                            f"`{folder}` holds more than {MAX_PROJECT_ENTRIES:,} files and folders: "
                            "too many for a project folder",
                            hint="pass the folder that holds the project's *.strata files (e.g. "
                            "`strata check examples/shop`), or move large data out of it",
                        )
                    try:
                        is_folder = entry.is_dir(follow_symlinks=False)
                        is_module = not is_folder and entry.name.endswith(MODULE_SUFFIX) and entry.is_file()
                    except OSError as error:  # a link loop: a dangling link is no file, no error
                        unreadable = unreadable or StrataError(
                            E_PROJECT,
                            f"cannot read `{entry.path}`: {error.strerror or error}",
                            hint="fix the link, or remove it from the project folder",
                        )
                        continue
                    if is_folder and not entry.name.startswith("."):
                        folders.append(Path(entry.path))
                    elif is_module:
                        found.append(Path(entry.path))
        except FileNotFoundError:
            continue  # removed while we walked
        except OSError as error:
            where = "project folder" if current == folder else "folder inside the project"
            unreadable = unreadable or StrataError(
                E_PROJECT,
                f"cannot read {where} `{current}`: {error.strerror or error}",
                hint="make it readable, or move it out of the project folder",
            )
    if unreadable is not None:
        raise unreadable
    return sorted(found)


def has_modules(folder: Path) -> bool:
    """Whether `folder` is a project folder: E013's reasons (too large, unreadable) count as no."""
    try:
        return bool(module_paths(folder))
    except StrataError:
        return False


@functools.lru_cache(maxsize=128)
def _parsed(text: str, display_path: Path) -> Module:
    """A module parsed once per process for the same text: a Dagster run loads its project when
    its code location loads and again when the run starts; sensors and checks load it often.
    Modules are frozen, and everything downstream copies their expressions before changing them."""
    from strata_dagster.language.parser import parse_module  # the grammar library, when parsing

    return parse_module(text, display_path)


def load_text(text: str, name: str = "module.strata") -> Project:
    """A project of one module given as text (for tests and tools)."""
    from strata_dagster.language.parser import parse_module

    return link_project(Path("."), [parse_module(text, name)])


def link_project(root: Path, modules: list[Module], *, text_digest: str = "") -> Project:
    sources: dict[str, Source] = {}
    models: dict[str, Model] = {}
    errors: list[StrataError] = []
    for module in modules:
        items: tuple[Source | Model, ...] = (*module.sources, *module.models)
        for item in items:
            previous = sources.get(item.name) or models.get(item.name)
            if previous is not None:
                errors.append(
                    StrataError(
                        E_DUPLICATE_NAME,
                        f"`{item.name}` is already defined at {previous.location}",
                        item.location,
                        hint="source and model names are unique across the project; rename one",
                    )
                )
                continue
            if isinstance(item, Source):
                sources[item.name] = item
            else:
                models[item.name] = item
    known = [*sources, *models]
    for model in models.values():
        for step in model.steps:
            if isinstance(step, (FromStep, JoinStep, SetOperationStep)) and step.relation not in known:
                close = difflib.get_close_matches(step.relation, known, n=1)
                errors.append(
                    StrataError(
                        E_UNKNOWN_RELATION,
                        f"model `{model.name}` reads `{step.relation}`, which is neither a source nor a model",
                        step.location,
                        hint=f"did you mean `{close[0]}`?"
                        if close
                        else "declare it with `source NAME { ... }`",
                    )
                )
    errors.extend(model_test_errors(tuple(t for m in modules for t in m.tests), sources, models))
    raise_collected(errors)
    order = _dependency_order(models)
    return Project(
        root=root,
        modules=tuple(modules),
        sources=sources,
        models=models,
        order=order,
        text_digest=text_digest,
    )


def _dependency_order(models: dict[str, Model]) -> tuple[str, ...]:
    graph = {name: {ref for ref in model.references if ref in models} for name, model in models.items()}
    # Deterministic: a static order that breaks ties by name.
    sorter = TopologicalSorter({name: sorted(deps) for name, deps in sorted(graph.items())})
    try:
        sorter.prepare()
    except CycleError as error:
        cycle = list(error.args[1])
        first = models[cycle[0]]
        raise StrataError(
            E_CYCLE,
            "models depend on each other in a cycle: " + " -> ".join(reversed(cycle)),
            first.location,
            hint="a model cannot read itself, directly or through other models",
        ) from None
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return tuple(order)


def _display_path(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path
