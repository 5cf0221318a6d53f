"""Tests of publication to Iceberg tables: pyiceberg, polars and DuckDB read what strata published."""
