"""What a `strata` command published, reported to the Dagster instance the project's code location
uses, so the CLI and Dagster share one history.

`strata run`, `backfill`, `rollback`, `promote`, `retire` and `branch` change what live views show.
When `DAGSTER_HOME` is set (the instance `dagster dev`, the webserver and the daemon use), the
command then reports to that instance, as runless events (`instance.report_runless_asset_event`):
the sources' observations with the fingerprints a run read, a materialization of each model
state Dagster has not recorded (its content's data version, code version and provenance; per
partition), the partitions companions' observations, and the `strata_stale_partitions` checks whose
result changed (orchestration.assets.catch_up). Without `DAGSTER_HOME`, or with
`STRATA_DAGSTER_REPORT=0`, the command line (cli.dagster_report) does not import this module, nor
Dagster, and reports nothing: the CLI never needs Dagster (CI). A report that fails is a warning
(W006): the command's write stands.

The asset keys are those of `build_definitions(project, warehouse=..., branch=...)` with the default
translator (a translator of your own: see docs/dagster.md).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.reads.partition_status import entry_facts
from strata_dagster.errors import W_DAGSTER_UNREPORTED, StrataError, StrataWarning
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.catch_up import catch_up
from strata_dagster.orchestration.checks.stale_partitions import StaleCheckReporter, partitioned_models_of
from strata_dagster.orchestration.definitions import build_definitions
from strata_dagster.orchestration.resources.strata import StrataResource


@dataclass(frozen=True)
class Reported:
    """What a command reported: events in all, and the instance's folder."""

    events: int
    home: str


def report_entry(
    project_dir: Path | str, warehouse: Path | str, entry: int, home: str
) -> Reported | StrataWarning | None:
    """Report the live state of the branch history entry `entry` changed to the instance in `home`
    ($DAGSTER_HOME); None when that branch is not `main` (the branch code locations show unless
    told otherwise); a W006 warning when the report failed (the command's write stands either way)."""
    try:
        return _report(Path(project_dir), Path(warehouse), entry, home)
    except StrataError as error:
        reason = error.render()
    except Exception as error:  # Dagster's own errors: an instance that cannot be opened, storage
        reason = f"{type(error).__name__}: {error}"
    return StrataWarning(
        W_DAGSTER_UNREPORTED,
        f"not reported to the Dagster instance in DAGSTER_HOME={home}: {reason}",
        hint=(
            "Dagster's view catches up when a strata step runs there (materialize the models, or "
            "observe the sources); set STRATA_DAGSTER_REPORT=0 to stop reporting from the command line"
        ),
    )


def _report(project_dir: Path, warehouse: Path, entry: int, home: str) -> Reported | None:
    facts = entry_facts(warehouse, entry)
    branch = facts.branch if facts is not None else DEFAULT_BRANCH
    if branch != DEFAULT_BRANCH:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Dagster's beta warnings and the load's own, printed elsewhere
        defs = build_definitions(project_dir, warehouse=warehouse, branch=branch)
        graph = defs.resolve_asset_graph()
    strata = StrataResource(project_dir=str(project_dir), warehouse=str(warehouse), branch=branch)
    description = (
        f"`strata {facts.kind}` {facts.run_id[:12]}, reported by the command line"
        if facts is not None
        else "reported by the command line"
    )
    metadata = {c.RUN_ID_KEY: facts.run_id} if facts is not None else {}
    count = 0
    with dg.DagsterInstance.get() as instance:
        events = catch_up(
            instance,
            strata,
            graph,
            source_versions=facts.sources if facts is not None else None,
            description=description,
            metadata=metadata,
        )
        for event in events:
            instance.report_runless_asset_event(event)
            count += 1
        for evaluation in StaleCheckReporter(partitioned_models_of(graph)).changed(instance, strata):
            instance.report_runless_asset_event(evaluation)
            count += 1
    return Reported(count, home)
