"""`strata gc`: drop the snapshots no branch and no kept run needs, and optionally shrink the file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from strata_dagster.cli.options import project_argument, resolve_warehouse, warehouse_option
from strata_dagster.cli.output import reports_errors, say
from strata_dagster.wording import counted

if TYPE_CHECKING:
    from strata_dagster.engine.commands.gc import GcResult


@click.command("gc")
@project_argument
@warehouse_option
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    default=None,
    help="Keep the snapshots of the last N runs (and backfills).",
)
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="Keep the snapshots of runs younger than AGE: 12h, 30d, 2w.",
)
@click.option(
    "--grace",
    default=None,
    metavar="AGE",
    help="Also keep every snapshot a branch showed less than AGE ago (30m, 1h; default: none on DuckDB, "
    "1h on Spark, whose readers query snapshots directly).",
)
@click.option(
    "--compact", is_flag=True, help="Then rewrite the warehouse file without its free space (shrinks it)."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print what was dropped and the bytes reclaimed as JSON."
)
@reports_errors
def gc_command(
    project: Path,
    warehouse: Path | None,
    keep: int | None,
    older_than: str | None,
    grace: str | None,
    compact: bool,
    as_json: bool,
) -> None:
    """Drop snapshots that no branch exposes and no kept run produced or published.

    Runs are kept by --keep N (the last N), by --older-than AGE (those younger), or both (either
    keeps). A branch's live snapshots are never dropped.
    """
    from strata_dagster.engine.commands.gc import gc, parse_age

    result = gc(
        resolve_warehouse(project, warehouse),
        keep,
        older_than=parse_age(older_than) if older_than is not None else None,
        compact_file=compact,
        grace=parse_age(grace, "--grace") if grace is not None else None,
    )
    if as_json:
        import json

        click.echo(json.dumps(gc_report(result), indent=2))
        return
    for record in result.dropped_snapshots:
        partition = f" [{record.partition_key}]" if record.partition_key else ""
        say(f"  dropped {record.model + partition:<40} {record.snapshot_id}")
    where = (
        f"the file shrank {result.file_bytes_before:,} -> {result.file_bytes_after:,} bytes"
        if result.is_compacted
        else "free inside the file; `--compact` gives it back to the disk"
    )
    say(
        f"dropped {counted(len(result.dropped), 'snapshot')}; kept the snapshots of "
        f"{counted(result.kept, 'run')}; reclaimed {counted(result.reclaimed_bytes, 'byte')} ({where})"
    )
    if result.iceberg_expired:
        say(f"iceberg: expired {counted(result.iceberg_expired, 'snapshot')}")
    if result.stamps_pruned:
        say(f"source stamps: removed {counted(result.stamps_pruned, 'record')} of files that changed since")
    if result.serving.files_removed or result.serving.catalogs_removed:
        say(
            f"serving copy: removed {counted(result.serving.catalogs_removed, 'retired catalog')} and "
            f"{counted(result.serving.files_removed, 'file')}, {counted(result.serving.bytes_removed, 'byte')}"
        )


def gc_report(result: GcResult) -> dict[str, object]:
    return {
        "dropped": [
            {
                "snapshot_id": record.snapshot_id,
                "model": record.model,
                "partition": record.partition_key,
                "table": record.table_name,
            }
            for record in result.dropped_snapshots
        ],
        "kept_runs": result.kept,
        "reclaimed_bytes": result.reclaimed_bytes,
        "compacted": result.is_compacted,
        "file_bytes_before": result.file_bytes_before,
        "file_bytes_after": result.file_bytes_after,
        "serving_catalogs_removed": result.serving.catalogs_removed,
        "serving_files_removed": result.serving.files_removed,
        "serving_bytes_removed": result.serving.bytes_removed,
        "listing_cache_files_removed": result.listings_removed,
        "parse_cache_files_removed": result.parsed_removed,
        "iceberg_snapshots_expired": result.iceberg_expired,
        "source_stamp_records_pruned": result.stamps_pruned,
    }
