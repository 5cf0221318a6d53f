"""Snapshot files removed or damaged by hand: what a run says when it rebuilds over them (W005),
and what the commands that cannot rebuild say (E038), naming the file and the repair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from strata_dagster.backends.base import FileDamage
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.errors import E_SNAPSHOT_FILE, W_SNAPSHOT_FILE_REBUILT, StrataError, StrataWarning


def describe(damaged: Sequence[FileDamage]) -> str:
    first = damaged[0]
    more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
    return f"`{first.path}` is {first.problem}{more}"


def rebuilt_reason(damaged: Sequence[FileDamage]) -> str:
    """Why a model was rebuilt in full: its state's snapshot file could not be read."""
    return f"the live state's snapshot file {describe(damaged)}: rebuilt"


def repair_command(models: Sequence[str], branch: str = DEFAULT_BRANCH) -> str:
    on_branch = "" if branch == DEFAULT_BRANCH else f" --branch {branch}"
    return f"`strata run PROJECT --models {','.join(sorted(models))}{on_branch}`"


def rebuilt_warning(damaged: Mapping[str, Sequence[FileDamage]]) -> StrataWarning:
    models = ", ".join(f"`{model}`" for model in sorted(damaged))
    files = "; ".join(describe(found) for _, found in sorted(damaged.items()))
    return StrataWarning(
        W_SNAPSHOT_FILE_REBUILT,
        f"rebuilt {models}: a snapshot file the run would have kept or built on could not be read ({files})",
        hint="a snapshot file is written once and never changed: find what removed or changed it; "
        "`strata doctor PROJECT` checks every file the warehouse refers to",
    )


def unserved_warning(left_out: Mapping[str, str]) -> StrataWarning:
    """W005 for the live views the serving copy leaves out: a snapshot file they read is damaged."""
    views = ", ".join(f"`{view}`" for view in sorted(left_out))
    first = left_out[min(left_out)]
    models = [view.split(".", 1)[1].removeprefix("v_") for view in sorted(left_out)]
    return StrataWarning(
        W_SNAPSHOT_FILE_REBUILT,
        f"readers are not served {views}: {first}",
        hint=f"{repair_command(models)} rebuilds {'it' if len(models) == 1 else 'them'} (on a branch, "
        "add `--branch BRANCH`); `strata doctor PROJECT` checks every file the warehouse refers to",
    )


def damaged_error(damaged: Mapping[str, Sequence[FileDamage]], branch: str, doing: str) -> StrataError:
    """E038: the live states of `damaged`'s models read files that are missing or damaged."""
    models = sorted(damaged)
    files = "; ".join(f"`{model}`: {describe(damaged[model])}" for model in models)
    return StrataError(
        E_SNAPSHOT_FILE,
        f"cannot {doing}: a snapshot file of the live state is missing or damaged ({files})",
        subject=models[0],
        hint=f"{repair_command(models, branch)} rebuilds {'it' if len(models) == 1 else 'them'} "
        "(a run rebuilds every model whose snapshot file cannot be read)",
    )
