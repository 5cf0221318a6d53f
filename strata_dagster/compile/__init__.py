"""Compile strata models to DuckDB SQL as sqlglot ASTs (no duckdb, no dagster here)."""

from strata_dagster.compile.compiler import CompiledModel, compile_model
from strata_dagster.compile.project import CompiledProject, compile_project
from strata_dagster.compile.relations import DefaultRelations, model_view, source_relation

__all__ = [
    "CompiledModel",
    "CompiledProject",
    "DefaultRelations",
    "compile_model",
    "compile_project",
    "model_view",
    "source_relation",
]
