"""Which models become assets: a selection as `strata run --models` reads it (names, globs,
`tag:`, `+`), plus every model those read, since a strata asset is built through its inputs."""

from collections.abc import Sequence
from dataclasses import replace

from strata_dagster.language.definition import Project
from strata_dagster.language.selection import select


def selected_project(project: Project, selection: str | Sequence[str]) -> Project:
    """`project` with only the selected models and their upstream models in its build order; the
    sources all stay. A selector that matches nothing is E025."""
    texts = [selection] if isinstance(selection, str) else list(selection)
    needed = set(select(project, texts))
    pending = list(needed)
    while pending:
        for ref in project.upstream_models(pending.pop()):
            if ref not in needed:
                needed.add(ref)
                pending.append(ref)
    return replace(project, order=tuple(name for name in project.order if name in needed))
