"""Tests of strata_dagster.engine: runs as a whole, crashes and recovery."""
