"""The Spark engine: the only package that imports pyspark (ARCHITECTURE.md, Layering)."""
