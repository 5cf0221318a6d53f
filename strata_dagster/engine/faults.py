"""Fault injection for the crash tests: the process kills itself (SIGKILL) at a named write step.

Set STRATA_KILL_AT to one of WRITE_STEPS; never set in production. The crash tests run a real
`strata run` subprocess once per step and check the warehouse afterwards.
"""

from __future__ import annotations

from strata_dagster.faults import KILL_AT_ENV, checkpoint

__all__ = ["COMPACT_STEPS", "KILL_AT_ENV", "WRITE_STEPS", "checkpoint"]
WRITE_STEPS = (
    "migrated",
    "transaction_started",
    "snapshot_created",
    "pins_checked",
    "views_pointed",
    "history_written",
    "committed",
)
# The steps of `strata gc --compact` (warehouse/compaction.py), after each of which a crash
# leaves a complete warehouse file: the old one, or the compacted one.
COMPACT_STEPS = ("compact_copied", "compact_verified", "compact_replaced")
