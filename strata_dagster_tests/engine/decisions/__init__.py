"""Tests of engine.decisions and engine.plan: what a run decides, what `strata plan` says."""
