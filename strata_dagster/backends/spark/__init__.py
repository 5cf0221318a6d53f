"""The Spark backend: the only package that imports pyspark (docs/architecture.md, Layering)."""
