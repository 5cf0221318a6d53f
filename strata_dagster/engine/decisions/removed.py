"""Live views that outlive their models: a model renamed or deleted from the project keeps the view
its last run published, and readers would get its rows, which nothing rebuilds any more, forever.
Runs and plans warn about them (W004); `strata retire` drops them (engine/commands/operations.py)."""

from __future__ import annotations

from collections.abc import Mapping

from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema, view_name
from strata_dagster.errors import W_REMOVED_MODEL, StrataWarning
from strata_dagster.language.definition import Project
from strata_dagster.state.history import PYTHON_ENTRY_KIND, HistoryReader


def removed_models(
    reader: HistoryReader, pointers: Mapping[str, tuple[str, ...]], project: Project
) -> tuple[str, ...]:
    """The models of `pointers` (a branch's) that `project` does not define. A Python model's view
    (defined in Dagster code, not in the project) is never one: its snapshot was written by a
    history entry of its own kind."""
    found = []
    for model, ids in pointers.items():
        if model in project.models:
            continue
        head = reader.snapshot(ids[-1])
        created = reader.entry(head.created_entry) if head is not None else None
        if created is None or created.kind != PYTHON_ENTRY_KIND:
            found.append(model)
    return tuple(sorted(found))


def removed_warning(removed: tuple[str, ...], branch: str) -> StrataWarning:
    views = ", ".join(f"`{branch_schema(branch)}.{view_name(model)}`" for model in removed)
    return StrataWarning(
        W_REMOVED_MODEL,
        f"live {'view' if len(removed) == 1 else 'views'} {views} of "
        f"{'a model' if len(removed) == 1 else 'models'} no longer in the project: readers get rows "
        "that nothing rebuilds any more",
        hint=f"`strata retire PROJECT{'' if branch == DEFAULT_BRANCH else ' --branch ' + branch}` drops "
        f"{'it' if len(removed) == 1 else 'them'} (recorded in the history; `strata rollback` to an "
        "earlier run brings it back), or restore the model to keep building it",
    )
