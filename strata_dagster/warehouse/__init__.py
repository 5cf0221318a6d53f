"""The warehouse: the only package that touches DuckDB (README.md, Where things are).

Submodules are imported explicitly (`from strata_dagster.warehouse.sample_data import ...`) so that
importing this package never loads duckdb by itself.
"""
