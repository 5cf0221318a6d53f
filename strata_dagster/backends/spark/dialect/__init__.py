"""Spark's SQL dialect: the compiled DuckDB SQL of a model translated to Spark SQL, or refused."""
