"""`strata backfill`: rebuild from a recorded run's context with corrections, under a reason.

A backfill starts from the run it corrects (its models, branch and source overrides), applies
corrections (`--source s=t` wins over the run's own override; `--models` trims), and builds only
what the corrections make stale. It records `backfill_of` and the reason, and never rewrites
history: the corrected run stays intact for rollback, replay and verify. Every error a backfill
reports is E085, as the language fixes it (a missing reason, an unknown run, model, source or table, a
malformed correction or partition, a pin or build failure), with the specific cause's own code
in its message: `backfill cannot start (E023): no run ...`, `backfill failed (E030): ...`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from strata_dagster.backends.duckdb.sources import parse_overrides
from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.commands.operations import find_entry
from strata_dagster.engine.context import select_models
from strata_dagster.engine.decisions.definition import RunRequest
from strata_dagster.engine.partition_keys import parse_partitions
from strata_dagster.engine.run import ProgressCallback, RunResult, run
from strata_dagster.errors import (
    E_BACKFILL,
    E_BUILD,
    E_CONTRACT,
    E_RESOURCE_LIMIT,
    E_UNIQUE,
    E_UNKNOWN_RUN,
    StrataError,
    StrataErrorGroup,
)
from strata_dagster.language import load_project
from strata_dagster.language.definition import Project
from strata_dagster.state.history import Entry

BACKFILL = "backfill"
NOTHING_PUBLISHED = "nothing was published"


# Failures of the build itself (a pin, a contract, the engine, a resource limit): the backfill
# started and failed; any other cause (a mistake in what was asked) means it could not start.
_BUILD_FAILURES = frozenset({E_UNIQUE, E_CONTRACT, E_BUILD, E_RESOURCE_LIMIT})


def as_backfill_error(error: StrataError) -> StrataError:
    """`error` as the E085 a backfill reports, its own code and message kept in the message (each
    error of a group likewise); an E085 stays as it is."""
    if isinstance(error, StrataErrorGroup):
        return StrataErrorGroup(as_backfill_error(one) for one in error.errors)
    if error.code == E_BACKFILL:
        return error
    hint = error.hint or ""
    if NOTHING_PUBLISHED not in hint:  # pin and contract errors say it already
        hint = (hint + "; " if hint else "") + NOTHING_PUBLISHED
    what = "failed" if error.code in _BUILD_FAILURES else "cannot start"
    return StrataError(
        E_BACKFILL,
        f"backfill {what} ({error.code}): {error.message}",
        error.location,
        hint=hint,
        subject=error.subject,
    )


@contextmanager
def backfill_errors() -> Iterator[None]:
    """Within the block, every StrataError is reported as the backfill's E085 (`as_backfill_error`)."""
    try:
        yield
    except StrataError as error:
        raise as_backfill_error(error) from None


def run_backfill_request(request: RunRequest, progress: ProgressCallback | None = None) -> RunResult:
    """`run(request)`, with a backfill request's errors as E085 (an ordinary run's as they are)."""
    if request.kind != BACKFILL:
        return run(request, progress)
    with backfill_errors():
        return run(request, progress)


def backfill(
    project_dir: Path | str,
    warehouse: Path | str,
    run_id: str,
    reason: str | None,
    *,
    sources: Iterable[str] | Mapping[str, str] = (),
    models: Iterable[str] = (),
    full_refresh: bool = False,
    progress: ProgressCallback | None = None,
    partitions: Iterable[str] = (),
) -> RunResult:
    """Rebuild what corrections make stale, recorded as a backfill of `run_id` with `reason`;
    `full_refresh` rebuilds the selected models from all their input, incremental ones too;
    `partitions` rebuilds exactly those partitions of the selected partitioned models. Every
    error is E085 (`as_backfill_error`)."""
    request = backfill_request(
        project_dir,
        warehouse,
        reason,
        run_id=run_id,
        sources=sources,
        models=models,
        full_refresh=full_refresh,
        partitions=partitions,
    )
    return run_backfill_request(request, progress)


def backfill_request(
    project_dir: Path | str,
    warehouse: Path | str,
    reason: str | None,
    *,
    run_id: str | None = None,
    sources: Iterable[str] | Mapping[str, str] = (),
    models: Iterable[str] = (),
    branch: str | None = None,
    full_refresh: bool = False,
    partitions: Iterable[str] = (),
) -> RunRequest:
    """The run a backfill makes, checked before anything is built, every mistake as E085 with its
    own code in the message: a missing reason; an unknown run (E023) or model (E025), a malformed
    or unknown source override or a correction table that does not exist (E022), or `partitions`
    that are no days, months or ranges of them (E040; whether they are partitions of the selected
    models is checked by the run). Without `run_id` it corrects no recorded run (the corrections
    alone apply). `branch`, when given, is the branch the caller builds: a corrected run of
    another branch is refused. Reads the warehouse read-only."""
    with backfill_errors():
        return _checked_request(
            project_dir, warehouse, reason, run_id, sources, models, branch, full_refresh, partitions
        )


def _checked_request(
    project_dir: Path | str,
    warehouse: Path | str,
    reason: str | None,
    run_id: str | None,
    sources: Iterable[str] | Mapping[str, str],
    models: Iterable[str],
    branch: str | None,
    full_refresh: bool,
    partitions: Iterable[str],
) -> RunRequest:
    if reason is None or not reason.strip():
        raise StrataError(
            E_BACKFILL,
            "a backfill needs a reason",
            hint='say why, e.g. --reason "corrected upstream extract"; without one it is only a run',
        )
    project = load_project(Path(project_dir))
    partitions = tuple(partitions)
    parse_partitions(partitions)
    corrections = parse_overrides(sources if isinstance(sources, Mapping) else list(sources), project)
    selection = tuple(models)
    requested = select_models(project, selection) if selection else ()
    corrected = _corrected_entry(Path(warehouse), run_id) if run_id is not None else None
    overrides = {**(corrected.overrides if corrected else {}), **corrections}
    if corrected is not None and branch is not None and corrected.branch != branch:
        raise StrataError(
            E_BACKFILL,
            f"run `{corrected.run_id[:12]}` built branch `{corrected.branch}`, not `{branch}`",
            hint=f"correct a run of branch `{branch}`, or build branch `{corrected.branch}`",
        )
    if overrides:
        _check_override_tables(Path(warehouse), project, overrides)
    trimmed = requested or (
        [name for name in corrected.models if name in project.models] if corrected else []
    )
    return RunRequest(
        project_dir=Path(project_dir),
        warehouse=Path(warehouse),
        models=tuple(trimmed),
        branch=corrected.branch if corrected is not None else (branch or DEFAULT_BRANCH),
        overrides=overrides,
        only_stale=True,
        full_refresh=full_refresh,
        partitions=tuple(partitions),
        kind=BACKFILL,
        backfill_of=corrected.run_id if corrected is not None else None,
        reason=reason.strip(),
    )


def _corrected_entry(warehouse: Path, run_id: str) -> Entry:
    with open_session(warehouse, read_only=True) as session:
        if not session.has_history():
            raise StrataError(
                E_UNKNOWN_RUN, f"no run `{run_id}` in the history", hint="the warehouse has no run yet"
            )
        return find_entry(session.history, run_id)


def _check_override_tables(warehouse: Path, project: Project, overrides: Mapping[str, str]) -> None:
    with open_session(warehouse, read_only=True) as session:
        session.prepare_sources(project, overrides)
