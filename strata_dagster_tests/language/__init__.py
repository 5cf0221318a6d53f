"""Tests of strata_dagster.language: grammar, parser errors, selection."""
