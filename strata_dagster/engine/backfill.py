"""`strata backfill`: rebuild from a recorded run's context with corrections, under a reason.

A backfill starts from the run it corrects (its models, branch and source overrides), applies
corrections (`--source s=t` wins over the run's own override; `--models` trims), and builds only
what the corrections make stale. It records `backfill_of` and the reason, and never rewrites
history: the corrected run stays intact for rollback, replay and verify. Every failure is E085.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from strata_dagster.engine.operations import find_entry
from strata_dagster.engine.run import ProgressCallback, RunRequest, RunResult, run
from strata_dagster.errors import E_BACKFILL, StrataError
from strata_dagster.language import load_project
from strata_dagster.warehouse.session import open_session
from strata_dagster.warehouse.sources import parse_overrides

BACKFILL = "backfill"


def _as_backfill_error(error: StrataError) -> StrataError:
    return StrataError(
        E_BACKFILL,
        f"backfill failed ({error.code}): {error.message}",
        error.location,
        hint=(error.hint + "; " if error.hint else "") + "nothing was published",
        subject=error.subject,
    )


def backfill(
    project_dir: Path | str,
    warehouse: Path | str,
    run_id: str,
    reason: str | None,
    *,
    sources: Iterable[str] | Mapping[str, str] = (),
    models: Iterable[str] = (),
    progress: ProgressCallback | None = None,
) -> RunResult:
    """Rebuild what corrections make stale, recorded as a backfill of `run_id` with `reason`."""
    if reason is None or not reason.strip():
        raise StrataError(
            E_BACKFILL,
            "a backfill needs a reason",
            hint='say why, e.g. --reason "corrected upstream extract"; without one it is only a run',
        )
    try:
        project = load_project(Path(project_dir))
        corrections = parse_overrides(sources if isinstance(sources, Mapping) else list(sources), project)
        with open_session(Path(warehouse), read_only=not Path(warehouse).exists()) as session:
            corrected = find_entry(session.history, run_id)
        requested = [name for name in models if name]
        unknown = [name for name in requested if name not in project.models]
        if unknown:
            raise StrataError(
                E_BACKFILL,
                f"no model named {', '.join(f'`{name}`' for name in unknown)}",
                hint="models: " + ", ".join(project.order),
            )
        selection = requested or [name for name in corrected.models if name in project.models]
        request = RunRequest(
            project_dir=Path(project_dir),
            warehouse=Path(warehouse),
            models=tuple(selection),
            branch=corrected.branch,
            overrides={**corrected.overrides, **corrections},
            only_stale=True,
            kind=BACKFILL,
            backfill_of=corrected.run_id,
            reason=reason.strip(),
        )
        return run(request, progress)
    except StrataError as error:
        if error.code == E_BACKFILL:
            raise
        raise _as_backfill_error(error) from None
