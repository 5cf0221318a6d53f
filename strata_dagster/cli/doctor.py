"""`strata doctor`: check every file the warehouse refers to; exit 1 on any error found."""

from __future__ import annotations

from pathlib import Path

import click

from strata_dagster.cli.options import project_argument, resolve_warehouse, warehouse_option
from strata_dagster.cli.output import reports_errors, say
from strata_dagster.wording import counted


@click.command("doctor")
@project_argument
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@reports_errors
def doctor_command(project: Path, warehouse: Path | None, as_json: bool) -> None:
    """Check every file PROJECT's warehouse refers to, and name the command that repairs each problem.

    Reads, never writes: the warehouse file (its history read whole), every snapshot file (whole,
    with as many rows as the history recorded), the serving copy readers open (its link, manifest,
    catalog, the entry it serves and the files it reads) and what is left over beside them.
    Exits 1 when something is damaged (leftovers alone do not fail it).
    """
    from strata_dagster.engine.commands.doctor import doctor

    report = doctor(resolve_warehouse(project, warehouse))
    if as_json:
        import json

        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        for finding in report.findings:
            label = (
                f"error[{finding.code}]"
                if finding.code and finding.code.startswith("E")
                else (f"warning[{finding.code}]" if finding.code else "leftover")
            )
            say(f"{label}: {finding.subject}: {finding.problem}")
            say(f"  = repair: {finding.repair}")
        errors = sum(1 for finding in report.findings if finding.code and finding.code.startswith("E"))
        others = len(report.findings) - errors
        say(
            f"doctor: {counted(report.files_checked, 'file')} checked; "
            f"{counted(errors, 'problem')}, {counted(others, 'note')}"
        )
    if not report.is_healthy:
        raise SystemExit(1)
