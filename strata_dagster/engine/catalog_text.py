"""A catalog's reading of the warehouse as text, and the catalog again from that text.

Why: an orchestrator that loads a project's definitions once and then in every run's process (as
Dagster does: its code server, then each run's worker) can hand the first load's reading to the
runs, which then do not open the warehouse to declare the same project (engine.catalog's
`catalog_from_reading`). The text names the project files it was read with: a project whose files
changed since is read again, never declared from another project's reading.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.catalog import Catalog, PartitionBounds, WarehouseReading, catalog_from_reading
from strata_dagster.engine.columns import ColumnInfo, RelationColumns
from strata_dagster.errors import Location, StrataWarning
from strata_dagster.language.definition import Project

FORMAT: Final = 1  # raised whenever the text's shape changes: an older text is then read again


def reading_text(catalog: Catalog) -> str | None:
    """The catalog's warehouse reading as JSON text; None when it has none to hand on (a catalog
    not read by `read_catalog`, or of a project not read from files)."""
    reading = catalog.reading
    if reading is None or not catalog.project.text_digest:
        return None
    return json.dumps(
        {
            "format": FORMAT,
            "project": catalog.project.text_digest,
            "branch": catalog.branch,
            "engine": reading.engine,
            "source_schemas": {
                name: [list(column) for column in schema] for name, schema in reading.source_schemas.items()
            },
            "bounds": {
                name: None if found is None else [found.first.isoformat(), found.last.isoformat()]
                for name, found in reading.bounds.items()
            },
            "columns": {
                name: {
                    "columns": [[column.name, column.type, column.is_not_null] for column in found.columns],
                    "unique": list(found.unique),
                }
                for name, found in reading.columns.items()
            },
            "warnings": [_warning_json(warning) for warning in reading.warnings],
            "lineage": {
                model: {column: [list(dep) for dep in deps] for column, deps in columns.items()}
                for model, columns in catalog.lineage.items()
            },
        },
        sort_keys=True,
    )


def catalog_from_text(
    text: str, project: Project, engine: str, branch: str = DEFAULT_BRANCH
) -> Catalog | None:
    """`project`'s catalog over the reading in `text`; None when that reading is not of these
    project files, this branch and `engine`, or was written in another format."""
    try:
        found: dict[str, Any] = json.loads(text)
    except ValueError:
        return None
    if (
        not isinstance(found, dict)
        or found.get("format") != FORMAT
        or not project.text_digest
        or found.get("project") != project.text_digest
        or found.get("branch") != branch
        or found.get("engine") != engine
    ):
        return None
    try:
        reading = _reading(found, engine)
    except (KeyError, TypeError, ValueError):  # not a text this code wrote: read the warehouse again
        return None
    return catalog_from_reading(project, reading, branch)


def _reading(found: dict[str, Any], engine: str) -> WarehouseReading:
    return WarehouseReading(
        engine,
        {
            name: tuple((column, kind) for column, kind in schema)
            for name, schema in found["source_schemas"].items()
        },
        {
            name: None
            if value is None
            else PartitionBounds(dt.date.fromisoformat(value[0]), dt.date.fromisoformat(value[1]))
            for name, value in found["bounds"].items()
        },
        {
            name: RelationColumns(
                tuple(
                    ColumnInfo(column, kind, is_not_null) for column, kind, is_not_null in value["columns"]
                ),
                tuple(value["unique"]),
            )
            for name, value in found["columns"].items()
        },
        tuple(_warning(value) for value in found["warnings"]),
        {
            model: {
                column: tuple((relation, name) for relation, name in deps) for column, deps in columns.items()
            }
            for model, columns in found["lineage"].items()
        },
    )


def _warning_json(warning: StrataWarning) -> list[Any]:
    location = warning.location
    place = None if location is None else [location.file, location.line, location.column]
    return [warning.code, warning.message, place, warning.hint]


def _warning(value: list[Any]) -> StrataWarning:
    code, message, place, hint = value
    return StrataWarning(code, message, None if place is None else Location(*place), hint)
