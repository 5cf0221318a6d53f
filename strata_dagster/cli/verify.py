"""`strata verify`: compare live models with full rebuilds in scratch space; exit 1 on any mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from strata_dagster.cli.options import (
    model_selection,
    models_option,
    project_argument,
    resolve_warehouse,
    split_partitions,
    warehouse_option,
)
from strata_dagster.cli.output import console, reports_errors, say
from strata_dagster.cli.runs import branch_option, source_option
from strata_dagster.wording import counted

if TYPE_CHECKING:
    from decimal import Decimal

    from rich.table import Table
    from rich.text import Text

    from strata_dagster.backends.duckdb.compare import ColumnTotal, Figures, Total
    from strata_dagster.engine.commands.verify import ModelVerification, VerifyReport

_HEADERS = ("rows\n(full)", "row\ndelta", "only\nfull", "only\nincr", "count\n≠", "rows\nin ≠", "totals")
_LEGEND = (
    "row delta = live (incremental) rows - full rows. Hash groups (sets of identical rows): only in "
    "full, only in incr(emental), in both with another count (count ≠); rows in ≠: rows of both "
    "sides in those groups. totals: sums of the numeric columns. append / append_new models keep "
    "history a full rebuild cannot give: their rows only in the live result are history, not "
    "differences, and append_new models are compared on their merge keys."
)


@click.command("verify")
@project_argument
@models_option("verify")
@click.option(
    "--partitions",
    default=None,
    help="Comma-separated days (2025-02-01), months (2025-02) or ranges first..last: compare only "
    "these partitions of partitioned models (then, without --models, only partitioned models are verified).",
)
@click.option(
    "--sources",
    "deep_sources",
    is_flag=True,
    help="Instead of models: re-hash every consumed partition of the business-versioned sources, and "
    "every source read from the record of its files' stamp (a `database:` file, a `path:` pattern's "
    "files), and compare them with their ledger or record (E054 on any difference).",
)
@warehouse_option
@branch_option
@source_option
@reports_errors
def verify_command(
    project: Path,
    models: str | None,
    partitions: str | None,
    deep_sources: bool,
    warehouse: Path | None,
    branch: str,
    sources: tuple[str, ...],
) -> None:
    """Check that every live model equals a full rebuild of it from the sources as they are now.

    The rebuild happens in scratch space that is always discarded: live snapshots, views and
    history are never touched. Rows are compared as multisets of row hashes, with the totals of
    every numeric column, per partition for partitioned models. Exits 1 on any difference.
    """
    from strata_dagster.backends.duckdb.sources import parse_overrides
    from strata_dagster.engine.commands.verify import verify
    from strata_dagster.language import load_project

    if deep_sources:
        _verify_sources(project, resolve_warehouse(project, warehouse))
        return
    overrides = parse_overrides(list(sources), load_project(project)) if sources else {}
    report = verify(
        project,
        resolve_warehouse(project, warehouse),
        models=model_selection(models),
        partitions=split_partitions(partitions),
        branch=branch,
        overrides=overrides,
    )
    print_report(report)
    if not report.is_equal:
        raise SystemExit(1)


def _verify_sources(project: Path, warehouse: Path) -> None:
    from strata_dagster.engine.sources.source_verify import mismatch_error, verify_sources

    checks = verify_sources(project, warehouse)
    for check in checks:
        bad = len(check.mismatched)
        if check.is_stamped:
            state = "equal to" if not bad else "DIFFERS from"
            console.print(f"{check.source}: {state} the record of its files' stamp", markup=False)
            continue
        state = "equal to its ledger" if not bad else f"{bad} partition(s) DIFFER"
        console.print(
            f"{check.source}: {len(check.partitions):,} consumed partition(s), {state}", markup=False
        )
        for part in check.mismatched:
            console.print(
                f"  {part.partition}: {part.recorded[0]:,} rows when consumed, {part.describe_now()}",
                markup=False,
            )
    error = mismatch_error(checks)
    if error is not None:
        raise error
    console.print(f"verify --sources: {len(checks)} source(s) equal to what was recorded", markup=False)


def print_report(report: VerifyReport) -> None:
    from rich import box
    from rich.table import Table

    scope = f", partitions {', '.join(report.partitions)}" if report.partitions else ""
    table = Table(
        title=f"live models on branch {report.branch} vs a full rebuild{scope}",
        caption=_LEGEND,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
        caption_justify="left",
    )
    table.add_column("model / partition", no_wrap=True)
    for header in _HEADERS:
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    totals: list[str] = []
    for model in report.models:
        totals.extend(_add_rows(table, model, show_all=bool(report.partitions)))
    console.print(table)
    for line in totals:
        console.print(line, markup=False, style="red", soft_wrap=True)
    for model in report.models:
        for difference in model.schema_differences:
            console.print(f"{model.model}: {difference}", markup=False, style="red", soft_wrap=True)
    notes: dict[str, list[str]] = {}
    for model in report.models:
        if model.note is not None:
            notes.setdefault(model.note, []).append(model.model)
    for note, names in notes.items():
        states = "state of" if len(names) == 1 else "states of"
        console.print(
            f"note: the live {states} {', '.join(names)} {'was' if len(names) == 1 else 'were'} {note}",
            markup=False,
            soft_wrap=True,
        )
    if report.is_equal:
        say(f"verify: {counted(len(report.models), 'model')} equal to a full rebuild")
    else:
        say(
            f"verify: {len(report.mismatched)} of {counted(len(report.models), 'model')} "
            f"{'differs' if len(report.mismatched) == 1 else 'differ'} from a full rebuild",
            style="red",
        )


def _add_rows(table: Table, model: ModelVerification, *, show_all: bool) -> list[str]:
    """Add the model's row, then its partitions' (all when a selection was given, else the differing
    ones); return a line per numeric total that differs."""
    from rich.text import Text

    name = Text(model.model)
    notes = [counted(len(model.partitions), "partition")] if model.partitioned_by else []
    if model.compared_columns:
        notes.append(f"keys: {', '.join(model.compared_columns)}")
    if model.is_history:
        notes.append(f"history: {counted(model.figures.history_rows, 'row')}")
    if model.table_history is not None:
        notes.append("a table's history: current versions vs the table")
    for note in notes:
        name.append(f"\n  {note}", style="dim")
    table.add_row(name, *_cells(model.figures, is_equal=model.is_equal))
    lines = [f"{model.model}: {_total_text(total)}" for total in model.figures.mismatched_totals]
    if model.table_history is not None and not model.table_history.is_equal:
        checked = model.table_history
        lines.append(
            f"{model.model}: {checked.bad_intervals:,} version(s) with a malformed or overlapping interval, "
            f"{checked.keys_not_one_current:,} key(s) with several current versions"
        )
    for part in model.partitions:
        if show_all or not part.is_equal:
            label = part.partition or "NULL"
            table.add_row(Text(f"  {label}"), *_cells(part.figures, is_equal=part.is_equal))
            lines.extend(f"{model.model} {label}: {_total_text(t)}" for t in part.figures.mismatched_totals)
    return lines


def _cells(figures: Figures, *, is_equal: bool) -> list[Text]:
    from rich.text import Text

    delta = Text(
        f"{figures.row_delta:+,}" if figures.row_delta else "0", style="red" if figures.row_delta else ""
    )
    counts = (
        figures.hash_groups_only_in_full,
        figures.hash_groups_only_in_incremental,
        figures.hash_groups_with_count_mismatch,
        figures.rows_in_mismatched_hash_groups,
    )
    mismatched = len(figures.mismatched_totals)
    return [
        Text(f"{figures.full_rows:,}"),
        delta,
        *(Text(f"{count:,}", style="red" if count else "") for count in counts),
        Text(f"{mismatched} ≠", style="red") if mismatched else Text("equal"),
        Text("equal", style="green") if is_equal else Text("DIFFERS", style="bold red"),
    ]


def _total_text(total: ColumnTotal) -> str:
    """`amount` totals 1,234.00 in full, 1,224.00 incrementally (delta -10.00)"""
    full, incremental = (_shown(value) for value in (total.full, total.incremental))
    text = f"`{total.column}` totals {_number(full)} in full, {_number(incremental)} incrementally"
    if full is None or incremental is None:
        return text
    # The shown values' difference, exact: the two sides may differ in type (DECIMAL live, DOUBLE in
    # a rebuild after a source column's type changed).
    return f"{text} (delta {incremental - full:+,})"


def _shown(value: Total) -> int | Decimal | None:
    """A total as printed: a float sum to 12 significant digits (its last digits depend on the
    order rows were added in)."""
    from decimal import Decimal  # imported when a total is shown, not by every command's start

    return Decimal(f"{value:.12g}") if isinstance(value, float) else value


def _number(value: int | Decimal | None) -> str:
    return "NULL" if value is None else f"{value:,}"
