"""Compile every model of a project in dependency order."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata_dagster.compile.compiler import CompiledModel, RelationResolver, compile_model
from strata_dagster.compile.determinism import make_windows_deterministic, volatile_warnings
from strata_dagster.compile.partition_types import partition_type_errors
from strata_dagster.compile.properties import partial_month_errors, property_errors
from strata_dagster.compile.relations import DefaultRelations
from strata_dagster.compile.scope import Columns
from strata_dagster.errors import StrataError, StrataWarning, raise_collected
from strata_dagster.language.definition import Project

SourceSchemas = Mapping[str, Sequence[tuple[str, str]] | Sequence[str]]


@dataclass(frozen=True)
class CompiledProject:
    project: Project
    models: dict[str, CompiledModel]
    warnings: tuple[StrataWarning, ...] = ()

    def sql(self, model: str, relation: RelationResolver | None = None, *, pretty: bool = True) -> str:
        """The model's SQL, reading sources as declared and models as their `main` views by default."""
        return self.models[model].sql(relation or DefaultRelations(self.project), pretty=pretty)


def compile_project(
    project: Project,
    source_schemas: SourceSchemas | None = None,
) -> CompiledProject:
    """Compile and validate every model. Raises StrataError (all errors found) on any mistake.

    `source_schemas` gives the columns of the sources whose schema is known (read from the
    warehouse); with it, unknown columns are errors everywhere downstream of those sources.
    """
    known: dict[str, Columns] = {
        name: tuple(col if isinstance(col, str) else col[0] for col in columns)
        for name, columns in (source_schemas or {}).items()
    }
    compiled: dict[str, CompiledModel] = {}
    errors: list[StrataError] = []
    warnings: list[StrataWarning] = []
    for name in project.order:
        model = project.models[name]
        try:
            result = compile_model(model, lambda rel: known.get(rel))
        except StrataError as error:
            errors.extend(error.errors)
            known[name] = None  # downstream still compiles, without cascading column errors
            continue
        errors.extend(property_errors(model, result))
        errors.extend(partial_month_errors(model, result))
        statement, found = make_windows_deterministic(model, result.statement, result.base_columns)
        warnings.extend(found)
        warnings.extend(volatile_warnings(model))
        compiled[name] = dataclasses.replace(result, statement=statement)
        known[name] = result.columns
    errors.extend(partition_type_errors(project, compiled, source_schemas or {}))
    raise_collected(errors)
    return CompiledProject(project, compiled, tuple(warnings))
