"""Tests of strata_dagster.state: history, ledgers."""
