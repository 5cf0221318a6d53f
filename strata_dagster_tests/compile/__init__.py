"""Tests of strata_dagster.compile: compiled SQL (golden files), partition types."""
