"""Tests of strata_dagster.backends: the boundary and the choice of a backend."""
