"""A delta over a business-versioned Parquet folder reads only the files it needs.

The source's relation globs every partition folder, and DuckDB expands that glob (and prunes the
files by their `col=value` folder) for each statement over it: with hundreds of folders this costs
more than reading one new day. When the rows a delta reads provably lie in a known set of
consumed partitions, the delta's context reads those partitions' files by name instead
(`read_parquet([...])`, same options, same frontier filter), with the whole source's totals from
the ledger, so every figure it records is the one the full relation would give:

- an `append` model whose `cdc_column` is the source's partition column (`partitioned_by: col`)
  and has no `lateness`: its window (watermark, high] holds exactly the rows of the partitions
  after the watermark;
- a `partitioned_by` model cut like the source, reading nothing else: the partitions it
  recomputes are those whose evidence differs from what its last build recorded, and their rows
  lie in the consumed partitions of those days (or months).

Anything else (upserts, joins, a restarted ledger, `--partitions` requests) keeps the full relation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlglot import exp

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.builds.incremental import cdc_on_raw_rows
from strata_dagster.engine.builds.partitions import partition_grain
from strata_dagster.engine.builds.strategy import IncrementalContext
from strata_dagster.engine.sources.business import BusinessReading, files_relation, is_after
from strata_dagster.language.definition import Model, Source
from strata_dagster.sql.render import render
from strata_dagster.state.ledger import PartitionEvidence


def narrowed_context(
    ctx: IncrementalContext,
    reading: BusinessReading,
    source: Source,
    previous_detail: dict[str, Any],
    previous_watermark: str | None,
    is_cut_like: bool,
) -> IncrementalContext:
    """`ctx` with the business source read from only the files its delta needs (see the module)."""
    if reading.reset_reason is not None or reading.expired or source.path is None:
        return ctx
    model = ctx.model
    if tuple(model.references) != (source.name,):
        return ctx
    keep = None
    if model.properties.partitioned_by is not None and model.properties.merge_strategy == "replace":
        keep = _affected_partitions(model, ctx, previous_detail) if is_cut_like else None
    elif model.properties.merge_strategy == "append":
        keep = _after_watermark(model, ctx.compiled, source, reading, previous_watermark)
    if keep is None:
        return ctx
    narrowed = files_relation(reading, keep)
    if narrowed is None:
        return ctx
    full = reading.relation
    totals = dict(ctx.source_totals)
    if render(full) in totals:
        totals[render(narrowed)] = totals[render(full)]
    return replace(
        ctx,
        relation=lambda name: narrowed.copy() if name == source.name else ctx.relation(name),
        source_totals=totals,
    )


def _after_watermark(
    model: Model, compiled: CompiledModel, source: Source, reading: BusinessReading, watermark: str | None
) -> Any:
    spec = source.partitioned_by
    raw_cdc = cdc_on_raw_rows(compiled, model)
    if (
        spec is None
        or spec.grain != "key"
        or watermark is None
        or model.properties.lateness is not None
        or not compiled.is_base_passthrough
        or not isinstance(raw_cdc, exp.Column)
        or raw_cdc.name != spec.column
    ):
        return None

    if any(is_after(item.key, watermark) is None for item in reading.consumed):
        return None
    return lambda item: bool(is_after(item.key, watermark))


def _affected_partitions(model: Model, ctx: IncrementalContext, previous_detail: dict[str, Any]) -> Any:
    before = previous_detail.get("partition_fingerprints")
    groups = ctx.partition_groups
    if not isinstance(before, dict) or groups is None or None in groups:
        return None
    now = {key: [count, hash_sum] for key, (count, hash_sum) in groups.items()}
    affected = {key for key in now if now[key] != before.get(key)}
    is_month = partition_grain(model) == "month"

    def keep(item: PartitionEvidence) -> bool:
        day = item.key[:10]
        return (f"{day[:7]}-01" if is_month else day) in affected

    return keep
