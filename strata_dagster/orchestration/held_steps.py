"""A run's consecutive strata steps share one open warehouse file.

Why: each strata step (a model's output, a source's observation, the checks) opened the warehouse
file and closed it again: DuckDB reads the file's catalog when it opens and checkpoints when the
last connection closes, 15-25 ms each. The example's first *Materialize all* opened it 15 times in
its three runs (docs/dagster.md, "The Dagster path's cost"). Within a run, a strata step now keeps
it open for the next one (warehouse.connection.held_open: each session is a connection of its own
to the one open database, with its own transactions). It is closed before any other step starts
(a Python model's own code, a user's asset: no other code runs while this run holds the file),
when a step fails (the next one opens it afresh), and when the run's steps end.
"""

from collections.abc import Iterator, Set
from contextlib import ExitStack
from pathlib import Path

import dagster as dg

from strata_dagster.warehouse.connection import held_open


def held_between_steps(
    warehouse: Path, holding: Set[str], events: Iterator[dg.DagsterEvent]
) -> Iterator[dg.DagsterEvent]:
    """`events` (an in-process executor's, whose steps run in this thread as the events are drawn),
    with the warehouse held open from the start of a step in `holding` (step keys) until a step not
    in it starts, a step fails, or the events end."""
    with ExitStack() as held:
        is_held = False
        for event in events:
            if event.is_step_start and event.step_key in holding:
                if not is_held:
                    held.enter_context(held_open(warehouse))
                    is_held = True
            elif event.is_step_start or event.is_step_failure:
                held.close()
                is_held = False
            yield event
