"""The warehouse: the only package that touches DuckDB (ARCHITECTURE.md, Layering).

Submodules are imported explicitly (`from strata_dagster.warehouse.sample_data import ...`) so that
importing this package never loads duckdb by itself.
"""
