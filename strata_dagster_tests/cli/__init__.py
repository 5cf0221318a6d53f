"""Tests of the `strata` command line."""
