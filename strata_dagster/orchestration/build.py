"""What a SQL model's asset hands the IO manager: the build to run, never rows."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg


@dataclass(frozen=True)
class StrataBuildInput:
    """A source or model the build reads, and the data version Dagster knew for it."""

    name: str
    asset_key: dg.AssetKey
    kind: str  # "source" | "model"
    data_version: str | None  # None: never observed or materialized, or partitioned


@dataclass(frozen=True)
class CompanionRefresh:
    """A partitions companion to bring up to date after a build: the rows of an unpartitioned model
    per partition of `reader`, a partitioned model that reads it as `from` (see
    orchestration.companions)."""

    asset_key: dg.AssetKey
    reader: str
    partition_keys: tuple[str, ...]


@dataclass(frozen=True)
class StrataBuild:
    """Model `model` to build on the resource's branch, as Dagster planned it.

    `code_version` and `sql` are the model fingerprint and compiled SQL the definitions were loaded
    with; `inputs` carry the data versions Dagster knew for the model's inputs when the step
    started. The engine reads the inputs itself, inside its own transaction; the IO manager reports
    any input that changed after Dagster last saw it.
    """

    model: str
    code_version: str
    sql: str
    inputs: tuple[StrataBuildInput, ...] = ()
    partition_keys: tuple[str, ...] | None = None  # None: an unpartitioned model
    whole_asset_key: dg.AssetKey | None = None  # the companion carrying the whole model's version
    # The partitions companions of the model (when unpartitioned models read by partition) or of its
    # `from` (when partitioned): the IO manager records their changed partitions.
    companions: tuple[CompanionRefresh, ...] = ()
    # The definition's `dagster/column_schema`: its constraints go on the materialized schema too.
    column_schema: dg.TableSchema | None = None
