"""The DuckDB backend: one warehouse file, its snapshot files, and the serving copy readers open."""
