"""Parsed modules kept beside the warehouse, so that a run whose project did not change skips the
parser (and the import of its grammar library).

One file per project folder, `<warehouse>.parsed/<digest of the folder>.cache`, written under a
temporary name and renamed into place (and `<digest of the folder>.compiled`, the compiled project
kept the same way by compile/compile_cache.py). It holds the key of what it was parsed from (every
module's path as shown and its text, this package's own source, the Python and sqlglot versions)
and the modules, pickled. A file is used only when it is the current user's and nobody else may
write it or its folder, its format and key match, and its pickle names nothing but the language's
own classes and sqlglot expressions; anything else (a damaged, foreign or stale file) is ignored
and the project is parsed as if there were no cache. A cache is never wrong, at worst unused.
`strata gc` removes the files of project folders that are gone (`prune`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import marshal
import os
import pickle
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

SUFFIX = ".parsed"
_FORMAT = 1
_FILE_SUFFIX = ".cache"
COMPILED = ".compiled"  # the kind of the compiled project's files (compile/compile_cache.py)
_KINDS = (_FILE_SUFFIX, COMPILED)
# The classes a cached module may hold: the language's definitions, their locations and paths.
_ALLOWED = {
    "strata_dagster.language.definition": None,  # any of its classes
    "strata_dagster.errors": {"Location"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
}
_SQLGLOT_LOAD = ("sqlglot.serde", "load")
_LANGUAGE = Path(__file__).resolve().parent
# The other file of the folder: the renderings of a run that found nothing to do (render_memo).
KEPT_BESIDE = "renderings.memo"


def cache_dir_of(warehouse: Path) -> Path:
    """Where a warehouse file keeps the parsed modules of the projects run against it."""
    return warehouse.with_name(warehouse.name + SUFFIX)


def cache_key(modules: Sequence[tuple[str, str]]) -> str:
    """The key of modules given as (path as shown, text): it changes with any module, with this
    package's own code (the parser and what it builds), and with the Python and sqlglot versions."""
    digest = hashlib.sha256()
    digest.update(f"{_FORMAT}\0{sys.version}\0{sqlglot_version()}\0{language_digest()}\0".encode())
    for shown, text in modules:
        digest.update(f"{shown}\0{len(text)}\0{text}\0".encode())
    return digest.hexdigest()


def read(cache_dir: Path, folder: Path, key: str) -> list[Any] | None:
    """The modules cached for `folder` under `key`, or None (no usable file)."""
    modules = read_kept(cache_dir, folder, key)
    from strata_dagster.language.definition import Module

    if not isinstance(modules, list) or not all(isinstance(module, Module) for module in modules):
        return None
    return modules


def write(cache_dir: Path, folder: Path, key: str, modules: list[Any]) -> None:
    """Keep `modules` for `folder` under `key`; a cache that cannot be written is left out, and
    so is one beside a warehouse file that does not exist (a mistyped path leaves nothing)."""
    keep(cache_dir, folder, key, modules)


def read_kept(
    cache_dir: Path,
    folder: Path,
    key: str,
    kind: str = _FILE_SUFFIX,
    allowed: Mapping[str, set[str]] | None = None,
) -> Any:
    """What `keep` kept of `kind` (the file's suffix: `.cache` or COMPILED) for `folder` under `key`, or
    None (no usable file). Besides the
    language's classes and sqlglot's expressions, its pickle may name only `allowed`'s classes
    (module -> class names)."""
    path = _file_of(cache_dir, folder, kind)
    try:
        with open(path, "rb") as file:
            if not is_private(os.fstat(file.fileno())) or not is_private(os.stat(cache_dir)):
                return None
            header = marshal.loads(file.read())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(header, tuple) and len(header) == 4 and header[0] == _FORMAT):
        return None
    _, cached_folder, cached_key, payload = header
    if cached_folder != str(folder) or cached_key != key or not isinstance(payload, bytes):
        return None
    try:
        return _Unpickler(io.BytesIO(payload), allowed).load()
    except Exception:  # a file that does not unpickle as kept is no cache; compute instead
        return None


def keep(cache_dir: Path, folder: Path, key: str, value: Any, kind: str = _FILE_SUFFIX) -> None:
    """Keep `value` of `kind` for `folder` under `key`, written under a temporary name renamed into
    place; left out when it cannot be written, or when the warehouse file does not exist."""
    if not cache_dir.with_name(cache_dir.name.removesuffix(SUFFIX)).is_file():
        return
    path = _file_of(cache_dir, folder, kind)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        cache_dir.mkdir(mode=0o755, exist_ok=True)
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as file:
            file.write(marshal.dumps((_FORMAT, str(folder), key, payload)))
        os.replace(temporary, path)
    except (OSError, pickle.PicklingError, RecursionError):
        with contextlib.suppress(OSError):
            temporary.unlink()


def prune(cache_dir: Path) -> int:
    """Remove the files of project folders that are gone, of another format, unreadable, or left
    by a cut-short write, then the folder once empty (`strata gc`). Returns how many went."""
    try:
        names = sorted(os.listdir(cache_dir))
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = cache_dir / name
        if name == KEPT_BESIDE:
            continue
        if name.endswith(_KINDS):
            try:
                header = marshal.loads(path.read_bytes())
            except (OSError, EOFError, ValueError, TypeError):
                header = None
            if isinstance(header, tuple) and len(header) == 4 and header[0] == _FORMAT:
                if isinstance(header[1], str) and os.path.isdir(header[1]):
                    continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    with contextlib.suppress(OSError):
        cache_dir.rmdir()  # only when empty
    return removed


def _file_of(cache_dir: Path, folder: Path, kind: str = _FILE_SUFFIX) -> Path:
    return cache_dir / (hashlib.sha256(str(folder).encode()).hexdigest()[:32] + kind)


def is_private(status: os.stat_result) -> bool:
    """The current user's, and writable by nobody else."""
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def sqlglot_version() -> str:
    from sqlglot import __version__

    return str(__version__)


@functools.cache
def source_digest(files: tuple[Path, ...]) -> str:
    """A digest of source files' names and texts, once per process: a cache keyed by it is stale
    as soon as the code that made its content changed."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def language_digest() -> str:
    """A digest of this package's source files (the grammar included) and the errors it raises: a
    changed parser makes every cached module stale."""
    files = [path for path in sorted(_LANGUAGE.iterdir()) if path.suffix in (".py", ".lark")]
    return source_digest((*files, _LANGUAGE.parent / "errors.py"))


def _checked_expressions(load: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """sqlglot's loader of pickled expressions, given only payloads that name its own expression
    classes (its loader would import any module a class name names)."""
    from sqlglot import expressions as exp

    expression_classes = {"DataType.Type"}  # names found to be sqlglot's (a tree repeats a few)

    def checked(payloads: Any) -> Any:
        pending = [payloads]
        while pending:
            items = pending.pop()
            if items is None:
                continue
            if not isinstance(items, list):
                raise pickle.UnpicklingError("not an expression payload")
            for payload in items:
                if not isinstance(payload, dict):
                    raise pickle.UnpicklingError("not an expression payload")
                name = payload.get("c")
                if name is not None and (type(name) is not str or name not in expression_classes):
                    if not _is_expression_class(exp, name):
                        raise pickle.UnpicklingError(f"not a sqlglot expression: {name!r}")
                    expression_classes.add(name)
                if "t" in payload:
                    pending.append(payload["t"])
        return load(payloads)

    return checked


def _is_expression_class(exp: Any, name: object) -> bool:
    """Whether `name` (as sqlglot's pickles write it: bare, or qualified by a module of
    `sqlglot.expressions`, already imported) names one of sqlglot's expression classes."""
    if not isinstance(name, str):
        return False
    module_name, _, class_name = name.rpartition(".")
    if module_name and not module_name.startswith(f"{exp.__name__}."):
        return False
    module = sys.modules.get(module_name) if module_name else exp
    found = getattr(module, class_name, None) if module is not None and class_name.isidentifier() else None
    return isinstance(found, type) and issubclass(found, exp.Expr)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, also: Mapping[str, set[str]] | None = None) -> None:
        super().__init__(file)
        self.also = also or {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == _SQLGLOT_LOAD:
            return _checked_expressions(super().find_class(module, name))
        allowed = _ALLOWED.get(module, set())
        is_allowed = allowed is None or name in allowed or name in self.also.get(module, ())
        if (module in _ALLOWED or module in self.also) and "." not in name and is_allowed:
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not a kept class")
