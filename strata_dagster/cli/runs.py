"""`strata run`, `history`, `replay`, `rollback`, `branch`, `promote` (`gc`: cli/gc.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from strata_dagster.cli.dagster_report import report_to_dagster
from strata_dagster.cli.options import (
    model_selection,
    models_option,
    partitions_option,
    project_argument,
    resolve_warehouse,
    split_partitions,
    warehouse_option,
)
from strata_dagster.cli.output import console, error_console, print_warnings, reports_errors, say
from strata_dagster.errors import StrataError
from strata_dagster.names import DEFAULT_BRANCH
from strata_dagster.wording import counted

if TYPE_CHECKING:
    from strata_dagster.engine.commands.operations import PointerResult
    from strata_dagster.engine.reads.explain import BuildExplanation, EntryBuilds
    from strata_dagster.engine.run import ModelOutcome, RunResult
    from strata_dagster.language.definition import Project

build_models_option = models_option("build")
branch_option = click.option(
    "--branch", default=DEFAULT_BRANCH, show_default=True, help="Branch whose views to publish."
)
source_option = click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="SOURCE=TABLE",
    help="Read SOURCE from TABLE instead (repeatable).",
)

rebuild_partitions_option = partitions_option(
    "Rebuild exactly these partitions of the selected partitioned models, changed or not: days "
    "(2026-01-05) for day models, months (2026-01) for month models, ranges first..last, separated "
    "by commas. Other partitions keep their rows; downstream models follow the usual rules."
)


def print_outcome(outcome: ModelOutcome) -> None:
    # Nothing is published before the run's one commit: a progress line says what will be.
    marker = "to publish" if outcome.is_published else "unchanged"
    rows = (
        f"{'a view':>12}     "
        if outcome.is_view
        else f"{outcome.rows:>12,} {'row ' if outcome.rows == 1 else 'rows'}"
    )
    say(f"  {outcome.model:<28} {outcome.path:<8} {rows}  {outcome.duration_ms / 1000:>7.2f}s  {marker}")


@click.command("run")
@project_argument
@warehouse_option
@build_models_option
@branch_option
@source_option
@click.option(
    "--only-stale", is_flag=True, help="Build only what changed (sources' content or models' code)."
)
@click.option(
    "--full-refresh",
    is_flag=True,
    help="Rebuild the selected models from all their input, incremental ones too.",
)
@rebuild_partitions_option
@reports_errors
def run_command(
    project: Path,
    warehouse: Path | None,
    models: str | None,
    branch: str,
    sources: tuple[str, ...],
    only_stale: bool,
    full_refresh: bool,
    partitions: str | None,
) -> None:
    """Build PROJECT's models into new immutable snapshots and publish them atomically.

    Without --only-stale every selected model is recomputed (snapshots whose rows did not change are
    kept); with it, only models downstream of changed sources or changed code are. With
    --partitions, the selected partitioned models rebuild exactly those partitions.
    """
    from strata_dagster.backends.duckdb.sources import parse_overrides
    from strata_dagster.engine.context import check_branch, check_branch_of
    from strata_dagster.engine.damaged_files import rebuilt_warning
    from strata_dagster.engine.decisions.removed import removed_warning
    from strata_dagster.engine.run import NOTHING_TO_DO, RunRequest, run
    from strata_dagster.language import load_project

    check_branch(branch)  # every mistake in the command line is refused before the banner
    loaded = load_project(project, _parse_cache_dir(project, warehouse))
    check_branch_of(loaded, branch)
    overrides = parse_overrides(list(sources), loaded)
    request = RunRequest(
        project_dir=project,
        warehouse=resolve_warehouse(project, warehouse),
        models=model_selection(models),
        branch=branch,
        overrides=overrides,
        only_stale=only_stale,
        full_refresh=full_refresh,
        partitions=split_partitions(partitions),
    )
    say(f"strata run on branch {branch} ({request.warehouse})")
    result = run(request, print_outcome)
    if result.removed:
        print_warnings([removed_warning(result.removed, result.branch)])
    if result.rebuilt_damaged:
        print_warnings([rebuilt_warning(result.rebuilt_damaged)])
    if result.is_noop:
        say(NOTHING_TO_DO)
        if result.iceberg is not None and set(result.iceberg.how.values()) != {"current"}:
            print_iceberg(result)  # tables a failed or killed publication left behind caught up
        return
    print_partitions(result, loaded)
    print_published(result, f"run {result.run_id[:12] if result.run_id else '-'}")
    print_iceberg(result)
    report_to_dagster(project, request.warehouse, result.entry)


def _parse_cache_dir(project: Path, warehouse: Path | None) -> Path | None:
    """Where the project's parsed modules are kept, if its warehouse is usable (else the project is
    parsed, and the warehouse's error comes after the project's own, as without a cache)."""
    from strata_dagster.engine.context import parse_cache_dir

    try:
        return parse_cache_dir(resolve_warehouse(project, warehouse))
    except StrataError:
        return None


def print_iceberg(result: RunResult) -> None:
    """The Iceberg tables the publication changed (publication to Iceberg on)."""
    published = result.iceberg
    if published is None:
        return
    changed = [model for model, how in published.how.items() if how != "current"]
    console.print(
        f"iceberg: {len(changed)} of {counted(len(published.how), 'table')} brought to their views"
        + (f": {', '.join(changed)}" if changed else ""),
        markup=False,
        soft_wrap=True,
    )


def print_published(result: RunResult, what: str) -> None:
    """After the commit: what was built, and which models' views now show new snapshots."""
    built = sum(1 for outcome in result.outcomes if outcome.path != "reused")
    published = [outcome.model for outcome in result.outcomes if outcome.is_published]
    console.print(
        f"{what}: {built} built, {len(published)} published"
        + (f": {', '.join(published)}" if published else ""),
        markup=False,
        soft_wrap=True,
    )


def print_partitions(result: RunResult, project: Project) -> None:
    """What `--partitions` rebuilt, per model: the partitions asked for, and how they were built."""
    from strata_dagster.engine.builds.partition_range import REQUESTED_PARTITIONS
    from strata_dagster.engine.partition_keys import describe_keys

    for outcome in result.outcomes:
        requested = outcome.detail.get(REQUESTED_PARTITIONS)
        spec = project.models[outcome.model].properties.partitioned_by
        if not isinstance(requested, list) or spec is None:
            continue
        if outcome.path == "partitions":
            how = "rebuilt"
        elif outcome.path == "cutoff":
            how = "rebuilt: rows unchanged, the snapshot stays"
        else:
            how = f"rebuilt with the whole model ({outcome.detail.get('full_reason') or outcome.path})"
        console.print(
            f"  {outcome.model}: {counted(len(requested), 'partition')} {describe_keys(requested, spec.grain)} {how}",
            markup=False,
            soft_wrap=True,
        )


@click.command()
@project_argument
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON (oldest first).")
@reports_errors
def history(project: Path, warehouse: Path | None, as_json: bool) -> None:
    """List runs, backfills, rollbacks, branches and promotions, oldest first, and how and why each
    run built each model (path, the reason a delta was not trusted, window, partitions rebuilt)."""
    from rich.table import Table

    from strata_dagster.engine.reads.explain import history_and_interruptions

    entries, interrupted = history_and_interruptions(resolve_warehouse(project, warehouse))
    if as_json:
        import json

        click.echo(json.dumps([_entry_json(item) for item in entries], indent=2))
        return
    for commit_id in interrupted:
        error_console.print(
            f"warning: a publication was interrupted (commit {commit_id}): some live views may show "
            "snapshots no entry records; the next writing command (`strata run PROJECT`, or `strata "
            "rollback PROJECT RUN_ID`) repoints every view to the history below",
            markup=False,
            style="yellow",
        )
    table = Table("#", "run id", "kind", "branch", "started", "models", "backfill of", "reason")
    for item in entries:
        entry = item.entry
        table.add_row(
            str(entry.entry),
            entry.run_id[:12],
            entry.kind,
            entry.branch,
            entry.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            ", ".join(entry.models),
            (entry.backfill_of or "")[:12],
            entry.reason or "",
        )
    console.print(table)
    for item in entries:
        if item.builds:
            console.print(f"#{item.entry.entry} {item.entry.kind} {item.entry.run_id[:12]}:", markup=False)
            print_builds(item.builds)
            print_source_versions(item.entry.detail)


def _entry_json(item: EntryBuilds) -> dict[str, object]:
    from strata_dagster.engine.sources.business import SOURCE_VERSIONS

    entry = item.entry
    return {
        "run_id": entry.run_id,
        "kind": entry.kind,
        "branch": entry.branch,
        "started_at": entry.started_at.isoformat(),
        "finished_at": entry.finished_at.isoformat(),
        "models": list(entry.models),
        "backfill_of": entry.backfill_of,
        "reason": entry.reason,
        "overrides": entry.overrides,
        "partitions": entry.detail.get("partitions") or [],
        "source_versions": entry.detail.get(SOURCE_VERSIONS) or {},
        "entry": entry.entry,
        "builds": [build.as_dict() for build in item.builds],
    }


def print_source_versions(detail: dict[str, Any]) -> None:
    """The version of each business-versioned source a run read: its last consumed partition."""
    from strata_dagster.engine.sources.business import SOURCE_VERSIONS

    for source, version in sorted((detail.get(SOURCE_VERSIONS) or {}).items()):
        parts = [f"{version.get('partitions', 0):,} partitions consumed"]
        if version.get("new_partitions"):
            parts.append("new: " + ", ".join(version["new_partitions"]))
        if version.get("deferred_partitions"):
            parts.append("waiting: " + ", ".join(version["deferred_partitions"]))
        if version.get("ledger_reset"):
            parts.append(f"ledger restarted: {version['ledger_reset']}")
        console.print(
            f"  source {source} at {version.get('last_partition') or '(none)'}: " + "; ".join(parts),
            markup=False,
            soft_wrap=True,
        )


def print_builds(builds: tuple[BuildExplanation, ...]) -> None:
    """One line per model: its path, and why (the reason, window, partitions, rows read/merged)."""
    for build in builds:
        name = f"{build.model}[{build.partition_key}]" if build.partition_key else build.model
        console.print(f"  {name:<28} {build.path:<10} {build.text()}", markup=False, soft_wrap=True)


@click.command()
@project_argument
@click.argument("run_id")
@warehouse_option
@click.option(
    "--execute", is_flag=True, help="Rebuild in scratch space and compare with the recorded snapshots."
)
@reports_errors
def replay(project: Path, run_id: str, warehouse: Path | None, execute: bool) -> None:
    """Show what RUN_ID ran: inputs' fingerprints, snapshots and the path each model took."""
    from rich.table import Table

    from strata_dagster.engine.commands.replay import replay as replay_run

    report = replay_run(resolve_warehouse(project, warehouse), run_id, execute=execute)
    entry = report.entry
    console.print(
        f"run {entry.run_id}  ({entry.kind}, branch {entry.branch}, {entry.started_at:%Y-%m-%d %H:%M:%S})",
        markup=False,
    )
    if entry.backfill_of:
        console.print(f"backfill of {entry.backfill_of}", markup=False)
    if entry.reason:
        console.print(f"reason: {entry.reason}", markup=False)
    if entry.detail.get("partitions"):
        console.print("partitions: " + ", ".join(entry.detail["partitions"]), markup=False)
    if entry.overrides:
        console.print(
            "overrides: " + ", ".join(f"{k}={v}" for k, v in sorted(entry.overrides.items())), markup=False
        )
    sources = Table("source", "partition", "relation", "fingerprint", "rows", title="inputs")
    for source in report.sources:
        sources.add_row(
            source.source,
            source.partition_key,
            source.relation,
            source.fingerprint[:16],
            f"{source.row_count:,}",
        )
    console.print(sources)
    print_source_versions(entry.detail)
    models = Table("model", "partition", "path", "snapshot", "rows", "seconds", title="models")
    for model in report.models:
        models.add_row(
            model.model,
            model.partition_key,
            model.path,
            model.snapshot_id,
            f"{model.rows_out:,}",
            f"{model.duration_ms / 1000:.2f}",
        )
    console.print(models)
    console.print("how and why each model was built:", markup=False)
    print_builds(report.builds)
    if execute:
        checks = Table("model", "replay", "detail", title="replay --execute")
        for check in report.checks:
            checks.add_row(check.model, check.status, check.detail)
        console.print(checks)
        if not report.is_reproduced:
            raise SystemExit(1)


@click.command()
@project_argument
@click.argument("run_id")
@warehouse_option
@reports_errors
def rollback(project: Path, run_id: str, warehouse: Path | None) -> None:
    """Point the views back at what RUN_ID published (recorded as its own history entry)."""
    from strata_dagster.engine.commands import operations

    target = resolve_warehouse(project, warehouse)
    result = operations.rollback(target, run_id)
    print_pointer_result(result, f"rolled back to {run_id[:12]}")
    report_to_dagster(project, target, result.entry)


@click.command()
@project_argument
@warehouse_option
@branch_option
@reports_errors
def retire(project: Path, warehouse: Path | None, branch: str) -> None:
    """Drop the live views of models PROJECT no longer defines (renamed or deleted), recorded as a
    history entry; `strata rollback` to an earlier run brings them back. Python models' views
    (defined in Dagster code) are kept."""
    from strata_dagster.engine.commands import operations

    target = resolve_warehouse(project, warehouse)
    result = operations.retire_removed(project, target, branch)
    if not result.changes:
        say(f"every live view on branch {branch} belongs to a model of the project (nothing to do)")
        return
    print_pointer_result(result, f"retired on branch {branch} (run {(result.run_id or '-')[:12]})")
    report_to_dagster(project, target, result.entry)


def print_pointer_result(result: PointerResult, what: str) -> None:
    if not result.changes:
        say(f"{what}: views already point there (nothing to do)")
        return
    for change in result.changes:
        before = ",".join(change.before) if change.before else "-"
        after = ",".join(change.after) if change.after else "(view dropped)"
        console.print(f"  {change.model:<28} {before} -> {after}", markup=False)
    dropped = sum(1 for change in result.changes if not change.after)
    moved = len(result.changes) - dropped
    done = [f"{counted(moved, 'view')} repointed"] if moved else []
    done += [f"{counted(dropped, 'view')} dropped"] if dropped else []
    say(f"{what}: {', '.join(done)} (entry {result.entry})")


@click.group()
def branch() -> None:
    """Branches: named sets of view pointers, created and promoted without copying data."""


@branch.command("create")
@project_argument
@click.argument("name")
@click.option("--from", "source", default=DEFAULT_BRANCH, show_default=True, help="Branch to start from.")
@warehouse_option
@reports_errors
def branch_create(project: Path, name: str, source: str, warehouse: Path | None) -> None:
    """Create branch NAME pointing at the snapshots of --from (zero-copy)."""
    from strata_dagster.engine.commands import operations

    result = operations.create_branch(resolve_warehouse(project, warehouse), name, source)
    print_pointer_result(result, f"branch {name} created from {source}")


@branch.command("delete")
@project_argument
@click.argument("name")
@warehouse_option
@reports_errors
def branch_delete(project: Path, name: str, warehouse: Path | None) -> None:
    """Drop every view of branch NAME (recorded in the history; `strata rollback` to one of its runs
    brings it back)."""
    from strata_dagster.engine.commands import operations

    result = operations.delete_branch(resolve_warehouse(project, warehouse), name)
    print_pointer_result(result, f"branch {name} deleted (run {(result.run_id or '-')[:12]})")


@click.command()
@project_argument
@click.argument("source")
@click.option("--to", "target", default=DEFAULT_BRANCH, show_default=True, help="Branch to repoint.")
@warehouse_option
@reports_errors
def promote(project: Path, source: str, target: str, warehouse: Path | None) -> None:
    """Point --to's views at the snapshots branch SOURCE exposes (zero-copy)."""
    from strata_dagster.engine.commands import operations

    where = resolve_warehouse(project, warehouse)
    result = operations.promote(where, source, target)
    print_pointer_result(result, f"promoted {source} to {target}")
    report_to_dagster(project, where, result.entry)


COMMANDS: tuple[click.Command, ...] = (run_command, history, replay, rollback, retire, branch, promote)


@click.command()
@project_argument
@click.argument("run_id")
@warehouse_option
@click.option("--reason", default=None, help="Why this backfill runs (required; recorded in the history).")
@source_option
@build_models_option
@click.option(
    "--full-refresh",
    is_flag=True,
    help="Rebuild the backfill's selected models from all their input, incremental ones too.",
)
@rebuild_partitions_option
@reports_errors
def backfill(
    project: Path,
    run_id: str,
    warehouse: Path | None,
    reason: str | None,
    sources: tuple[str, ...],
    models: str | None,
    full_refresh: bool,
    partitions: str | None,
) -> None:
    """Rebuild from RUN_ID's context with corrected sources, recorded with a mandatory reason.

    With --partitions, the selected partitioned models rebuild exactly those partitions."""
    from strata_dagster.engine.commands.backfill import backfill as run_backfill
    from strata_dagster.engine.commands.backfill import backfill_errors
    from strata_dagster.engine.run import NOTHING_TO_DO
    from strata_dagster.language import load_project

    with backfill_errors():  # every error a backfill reports is E085, its cause's code in the message
        selection, items = model_selection(models), split_partitions(partitions)
        target = resolve_warehouse(project, warehouse)
        say(f"strata backfill of {run_id[:12]} ({target})")
        result = run_backfill(
            project,
            target,
            run_id,
            reason,
            sources=sources,
            models=selection,
            full_refresh=full_refresh,
            progress=print_outcome,
            partitions=items,
        )
    if result.is_noop:
        console.print("the corrections change nothing: " + NOTHING_TO_DO)
        return
    print_partitions(result, load_project(project))
    print_published(
        result, f"backfill {result.run_id[:12] if result.run_id else '-'} of {run_id[:12]} recorded"
    )
    report_to_dagster(project, target, result.entry)


COMMANDS = (*COMMANDS, backfill)
