"""`StrataDagsterTranslator`: how sources and models become asset keys, groups, partitions, metadata.

Subclass it and override a `get_*` method to customise one aspect; `build_definitions` asks it
about every source and model of the project.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import dagster as dg

from strata_dagster.compile.lineage import ColumnDeps
from strata_dagster.compile.relations import file_format, model_view
from strata_dagster.engine.builds.partition_bounds import PartitionBounds
from strata_dagster.engine.reads.columns import RelationColumns
from strata_dagster.errors import Location
from strata_dagster.language.definition import PartitionSpec, Refresh
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.assets.partitions import (
    arriving_partitions,
    coarser_time_mapping,
    time_partitions,
)
from strata_dagster.orchestration.sensors.automation import observation_condition, stale_condition

NodeKind = Literal["source", "model"]
_GROUP_CHARACTERS = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class StrataAssetProps:
    """One source or model of the project, as the translator is asked about it."""

    name: str
    kind: NodeKind
    module: str  # the module's file stem, e.g. `staging` for staging.strata
    description: str | None
    partitioned_by: PartitionSpec | None
    bounds: PartitionBounds | None  # first and last partition in the data (partitioned only)
    relation: str  # the table a source is read from, or the view a model is published as
    references: tuple[str, ...] = ()  # models: the sources and models it reads
    code_version: str | None = None  # models: the model fingerprint
    sql: str | None = None  # models: the compiled SQL
    tags: tuple[str, ...] = ()  # models: the `tags:` property
    refresh: Refresh | None = None  # models: rebuilt every run (`always`), hour or day whatever the inputs
    volatile_calls: tuple[str, ...] = ()  # models: the volatile functions it calls (now(), random(), ...)
    owners: tuple[str, ...] = ()  # models: the `owners:` property
    location: Location | None = None  # where the source or model is declared
    columns: RelationColumns | None = None  # None: not known without building
    lineage: tuple[tuple[str, ColumnDeps], ...] = ()  # models: output column -> what it derives from
    path: str | None = None  # sources: the files DuckDB reads (`path:`), if not a table
    freshness_seconds: int | None = None  # models: `freshness:`, how old its last build may be
    # The business-versioned source whose arriving partitions this node's partitions follow (the
    # source itself, or a model cut like it), and whether its keys are integers (`batch=17/`).
    arrives_from: str | None = None
    is_integer_keyed: bool = False
    # models: the Iceberg table it is published as (`<branch>.<model>`), when publication is on
    iceberg_table: str | None = None


class StrataDagsterTranslator:
    """Default mapping of a strata project onto Dagster; override any `get_*` method.

    `is_open_ended_partitions`: time partitions run on to the last complete day or month (they grow
    with time, as a production schedule expects) instead of ending at the last partition the data
    holds when the definitions load.
    """

    def __init__(self, *, is_open_ended_partitions: bool = False) -> None:
        self.is_open_ended_partitions = is_open_ended_partitions

    def get_asset_key(self, props: StrataAssetProps) -> dg.AssetKey:
        return dg.AssetKey([props.name])

    def get_whole_asset_key(self, props: StrataAssetProps) -> dg.AssetKey:
        """The companion asset of a partitioned node that carries one data version for all of it.

        Dagster does not propagate staleness from a partitioned asset to an unpartitioned consumer;
        the consumer depends on this companion too, whose data version changes with any partition.
        """
        return dg.AssetKey([f"{props.name}__whole"])

    def get_partition_companion_key(self, props: StrataAssetProps, reader: StrataAssetProps) -> dg.AssetKey:
        """The companion of unpartitioned model or source `props` that partitioned model `reader`
        reads it through (as `from`): `props`'s rows per partition of `reader`, one data version each.

        Dagster makes every partition stale when an unpartitioned dependency changes; the engine
        rebuilds only the partitions whose input rows changed, and so does the companion's
        staleness (see strata_dagster.orchestration.assets.companions).
        """
        assert reader.partitioned_by is not None
        return dg.AssetKey([f"{props.name}__by_{reader.partitioned_by.grain}"])

    def get_group_name(self, props: StrataAssetProps) -> str | None:
        return _GROUP_CHARACTERS.sub("_", props.module) or None

    def get_description(self, props: StrataAssetProps) -> str | None:
        """The model's `description:`, then a note of its refresh period. (A partitioned model's
        description then names the run tags a backfill needs and the jobs that do a first load or a
        range backfill in one run.)"""
        notes = [props.description] if props.description else []
        if props.refresh is not None:
            why = f"it calls {', '.join(props.volatile_calls)}" if props.volatile_calls else "declared"
            notes.append(
                f"Refresh: {props.refresh} ({why}); the stale sensor rebuilds it once its period has passed."
            )
        return "\n\n".join(notes) or None

    def get_freshness_policy(self, props: StrataAssetProps) -> dg.FreshnessPolicy | None:
        """A model's `freshness: 1 day`: Dagster's time-window freshness policy, failing once the
        last materialization (of any partition) is older than that; None without the property."""
        if props.freshness_seconds is None:
            return None
        return dg.FreshnessPolicy.time_window(fail_window=dt.timedelta(seconds=props.freshness_seconds))

    def get_partitions_def(self, props: StrataAssetProps) -> dg.PartitionsDefinition | None:
        """Daily or monthly partitions over the data's days (see `is_open_ended_partitions`); for a
        business-versioned source and the models cut like it, partitions that follow its arriving
        partitions (orchestration.assets.partitions.arriving_partitions)."""
        if props.partitioned_by is None:
            return None
        if props.arrives_from is not None:
            return arriving_partitions(
                props.partitioned_by,
                props.bounds,
                props.arrives_from,
                is_integer_keyed=props.is_integer_keyed,
            )
        return time_partitions(
            props.partitioned_by, props.bounds, is_open_ended=self.is_open_ended_partitions
        )

    def get_partition_mapping(
        self, props: StrataAssetProps, upstream: StrataAssetProps
    ) -> dg.PartitionMapping | None:
        """How `props`'s partitions map to `upstream`'s: a day reads the same day (Dagster's default);
        a month reads those of its days that exist, since the days end with the data and the last
        month may be partial (see `coarser_time_mapping`)."""
        if props.partitioned_by is None or upstream.partitioned_by is None:
            return None
        if props.partitioned_by.grain == upstream.partitioned_by.grain:
            return None
        return coarser_time_mapping()

    def get_automation_condition(self, props: StrataAssetProps) -> dg.AutomationCondition | None:
        """Sources are observed every minute; models are requested when an input's data version or
        their code version changed (see strata_dagster.orchestration.sensors.automation). Conditions act
        only while the `strata_automation` sensor is running."""
        if props.kind == "source":
            return None if props.partitioned_by is not None else observation_condition()
        return stale_condition()

    def get_metadata(self, props: StrataAssetProps) -> Mapping[str, Any]:
        metadata: dict[str, Any] = {
            c.MODULE_KEY: props.module,
            c.TABLE_NAME_KEY: props.relation,
        }
        if props.iceberg_table is not None:
            # What other engines read it as: `catalog.load_table(...)` of the `strata` catalog.
            metadata[c.TABLE_NAME_KEY] = props.iceberg_table
            metadata[c.ICEBERG_TABLE_KEY] = props.iceberg_table
        if props.kind == "source":
            metadata[c.SOURCE_KEY] = props.name
        else:
            metadata[c.MODEL_KEY] = props.name
            if props.sql is not None:
                metadata[c.SQL_KEY] = dg.MetadataValue.md(f"```sql\n{props.sql}\n```")
        if props.partitioned_by is not None:
            spec = props.partitioned_by
            metadata[c.PARTITIONED_BY_KEY] = f"{spec.grain}({spec.column})"
        if props.refresh is not None:
            metadata[c.REFRESH_KEY] = props.refresh
        if props.volatile_calls:
            metadata[c.VOLATILE_CALLS_KEY] = ", ".join(props.volatile_calls)
        schema = self.get_column_schema(props)
        if schema is not None:
            metadata[c.COLUMN_SCHEMA_KEY] = schema
        references = self.get_code_references(props)
        if references is not None:
            metadata[c.CODE_REFERENCES_KEY] = references
        return metadata

    def get_column_schema(self, props: StrataAssetProps) -> dg.TableSchema | None:
        """Column names and types (see strata_dagster.engine.reads.columns for where types come from; a
        column whose type is not known without building shows as `unknown`), `not null` from the
        contract, `unique` from a one-column `unique:` pin (a longer key is a table constraint)."""
        if props.columns is None:
            return None
        unique = props.columns.unique
        columns = [
            dg.TableColumn(
                column.name,
                column.type or "unknown",
                constraints=dg.TableColumnConstraints(
                    nullable=not column.is_not_null, unique=unique == (column.name,)
                ),
            )
            for column in props.columns.columns
        ]
        constraints = (
            dg.TableConstraints(other=[f"unique ({', '.join(unique)})"]) if len(unique) > 1 else None
        )
        return dg.TableSchema(columns=columns, constraints=constraints)

    def get_column_lineage(
        self, props: StrataAssetProps, upstream_keys: Mapping[str, dg.AssetKey]
    ) -> dg.TableColumnLineage | None:
        """For each output column of a model, the columns of the upstream assets it derives from
        (`upstream_keys`: the asset key of each source and model the model reads)."""
        if not props.lineage:
            return None
        return dg.TableColumnLineage(
            deps_by_column={
                column: [
                    dg.TableColumnDep(asset_key=upstream_keys[relation], column_name=name)
                    for relation, name in deps
                    if relation in upstream_keys
                ]
                for column, deps in props.lineage
            }
        )

    def get_code_references(self, props: StrataAssetProps) -> dg.CodeReferencesMetadataValue | None:
        """The `.strata` file and line that declare the source or model."""
        if props.location is None:
            return None
        reference = dg.LocalFileCodeReference(
            file_path=str(Path(props.location.file).resolve()),
            line_number=props.location.line,
            label=f"{props.kind} {props.name}",
        )
        return dg.CodeReferencesMetadataValue(code_references=[reference])

    def get_owners(self, props: StrataAssetProps) -> Sequence[str]:
        """A model's `owners:` (emails or `team:name`) as the asset's owners."""
        return props.owners

    def get_tags(self, props: StrataAssetProps) -> Mapping[str, str]:
        """A model's `tags: [...]` as tag keys with empty values (as dagster-dbt maps dbt tags), so
        Dagster's asset selection `tag:finance` finds what `strata run --models tag:finance` builds;
        `strata/refresh` (read by the stale sensor and the automation condition) and
        `strata/volatile` on models whose rows depend on when they run."""
        tags: dict[str, str] = {tag: "" for tag in props.tags}
        if props.refresh is not None:
            tags[c.REFRESH_TAG] = props.refresh
        if props.volatile_calls:
            tags[c.VOLATILE_TAG] = "true"
        return tags

    def get_kinds(self, props: StrataAssetProps) -> set[str]:
        """Models: `duckdb` and `sql`, and `iceberg` when published to Iceberg. Sources: the
        format of their files (`parquet`, `csv`, `json`), else `duckdb` for a table."""
        if props.kind == "model":
            return {"duckdb", "sql", *([c.ICEBERG_KIND] if props.iceberg_table is not None else [])}
        return {file_format(props.path)} if props.path is not None else {"duckdb"}


def model_relation(name: str, branch: str) -> str:
    view = model_view(name, branch)
    return f"{view.db}.{view.name}"
