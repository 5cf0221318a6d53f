"""The backends strata builds on, behind one interface (base.py): DuckDB and Spark."""
