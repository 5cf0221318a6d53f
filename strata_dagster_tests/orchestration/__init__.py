"""Tests of strata_dagster.orchestration, the Dagster layer, on real Dagster instances."""
