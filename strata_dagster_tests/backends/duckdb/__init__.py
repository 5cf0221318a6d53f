"""Tests of the DuckDB backend: serving copy, snapshot files, connections, limits."""
