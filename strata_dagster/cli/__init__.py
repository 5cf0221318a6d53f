"""The `strata` command line (the only package besides the Dagster layer that imports click)."""
