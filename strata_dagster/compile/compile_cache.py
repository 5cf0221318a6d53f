"""The compiled project kept beside the warehouse with its parsed modules (language/parse_cache.py),
so that a run whose project and sources' columns did not change compiles nothing.

One file per project folder, `<warehouse>.parsed/<digest of the folder>.compiled`, kept as the
parsed modules are (private to the current user, written under a temporary name and renamed into
place, its pickle naming nothing but the compiler's classes, the language's and sqlglot's
expressions). Its key covers everything a compile reads: the project's module files (their paths,
as given and as shown, and their texts), the sources' columns as the warehouse gave them, the
compiler's and the language's own source (and `names.py`), and the Python and sqlglot versions. Only a compile
without errors is kept; a file of another key, damaged or foreign, is ignored and written again.
A kept compile is never wrong, at worst unused.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.compile.project import CompiledProject, compile_project
from strata_dagster.errors import StrataWarning
from strata_dagster.language.definition import Project
from strata_dagster.language.parse_cache import (
    COMPILED,
    keep,
    language_digest,
    read_kept,
    source_digest,
    sqlglot_version,
)

_FORMAT = 1
_COMPILE = Path(__file__).resolve().parent
_KEPT_CLASSES = {
    "strata_dagster.compile.compiler": {"CompiledModel", "JoinKeys"},
    "strata_dagster.errors": {"StrataWarning", "Location"},
}

Schemas = Mapping[str, Sequence[tuple[str, str]] | Sequence[str]]


def compiled_project(project: Project, schemas: Schemas, cache_dir: Path | None) -> CompiledProject:
    """`compile_project(project, schemas)`, kept in `cache_dir` (None: compiled, nothing kept)."""
    key = _key(project, schemas) if cache_dir is not None and project.text_digest else None
    folder = Path(os.path.realpath(project.root))
    if cache_dir is not None and key is not None:
        kept = read_kept(cache_dir, folder, key, COMPILED, _KEPT_CLASSES)
        if _is_compile_of(kept, project):
            models, warnings = kept
            return CompiledProject(project, models, warnings)
    compiled = compile_project(project, schemas)
    if cache_dir is not None and key is not None:
        keep(cache_dir, folder, key, (compiled.models, compiled.warnings), COMPILED)
    return compiled


def _is_compile_of(kept: Any, project: Project) -> bool:
    if not (isinstance(kept, tuple) and len(kept) == 2):
        return False
    models, warnings = kept
    return (
        isinstance(models, dict)
        and list(models) == [name for name in project.order if name in project.models]
        and all(isinstance(model, CompiledModel) and model.name == name for name, model in models.items())
        and isinstance(warnings, tuple)
        and all(isinstance(warning, StrataWarning) for warning in warnings)
    )


def _key(project: Project, schemas: Schemas) -> str:
    columns = sorted(
        (name, [column if isinstance(column, str) else list(column) for column in found])
        for name, found in schemas.items()
    )
    digest = hashlib.sha256()
    digest.update(
        f"{_FORMAT}\0{sys.version}\0{sqlglot_version()}\0{language_digest()}\0{_compile_digest()}\0".encode()
    )
    digest.update(f"{project.root}\0{project.text_digest}\0".encode())
    digest.update(json.dumps([[str(module.path) for module in project.modules], columns]).encode())
    return digest.hexdigest()


def _compile_digest() -> str:
    """A digest of the compiler's source files (and the names it reads): a changed compiler makes
    every kept compile stale."""
    files = [path for path in sorted(_COMPILE.iterdir()) if path.suffix == ".py"]
    return source_digest((*files, _COMPILE.parent / "names.py"))
