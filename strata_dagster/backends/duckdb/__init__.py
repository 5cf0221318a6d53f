"""The DuckDB backend: the warehouse file, its snapshot files and serving copy, and the helpers
that read a warehouse (docs/architecture.md, The backend boundary).

Submodules are imported explicitly (`from strata_dagster.backends.duckdb.sample_data import ...`)
so that importing this package never loads duckdb by itself.
"""
