"""Row-wise models over a keyed source with no change column, rebuilt by the key buckets that changed.

A source versioned by its whole rows (`versioning: full`, the default) says only that something
changed. When it has a key, declared (`key: [order_id]` on the source) or taken from the merge key
of a model that reads it (an upsert or append_new whose first merge key is a source column carried
unchanged), a row-wise model carrying that key unchanged is sliced by `block(key)`, blocks of
`sql.segments.KEY_BLOCK` consecutive values of an integer key, or else by `bucket(key)`, the key's
hash modulo `sql.segments.KEY_BUCKETS`. Each build records the source's figures per bucket in a table
(engine.builds.key_bucket_figures); the next build recomputes completely the buckets whose figures
differ (inserts, updates and deletes all change them) and replaces those buckets in the model's
state, like a partitioned model's partitions (engine.builds.partitions, docs/architecture.md R7). A
source with neither key nor change column keeps a full build, and history and `strata plan` say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.builds.key_bucket_figures import (
    BUCKET_FIGURES,
    changed_buckets,
    current_figures,
    record,
)
from strata_dagster.engine.builds.partitions import (
    STRATEGY,
    UPSTREAM_SEGMENTS,
    PartitionBuild,
    joined_change,
    locality_problem,
    other_inputs,
    partition_grain,
    raw_partition,
)
from strata_dagster.language.definition import Project
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import KEY_GRAINS, Segment
from strata_dagster.state.history import SnapshotRecord

if TYPE_CHECKING:
    # Imported where a build uses them: a run's decisions read this module's analysis alone.
    from strata_dagster.engine.builds import joined_inputs
    from strata_dagster.engine.builds.incremental import Fallback
    from strata_dagster.engine.builds.segment import DeltaBuild
    from strata_dagster.engine.builds.strategy import IncrementalContext


def source_key(project: Project, compiled: Mapping[str, CompiledModel], source: str) -> str | None:
    """The column a source's rows are bucketed by: the first of its declared `key`, else the first
    merge key of an upsert or append_new model reading it, traced to a source column unchanged."""
    declared = project.sources[source].key
    if declared:
        return declared[0]
    for name in sorted(project.models):
        props = project.models[name].properties
        model = compiled.get(name)
        if model is None or model.base_relation != source or not props.merge_keys:
            continue
        if props.merge_strategy not in ("upsert", "append_new"):
            continue
        base = model.base_column(props.merge_keys[0])
        if base is not None and base not in model.let_names:
            return base
    return None


def is_bucketed(build: PartitionBuild) -> bool:
    return partition_grain(build.ctx) in KEY_GRAINS


class ByKeyBuckets:
    """A `PartitionBuild`'s change finder for a model sliced by key buckets: the buckets whose
    source figures differ from those the live state recorded, and those the changed joined inputs
    reach.

    Returns (from `changed_slices`):
        tuple: the buckets to recompute, the facts the new state records (its figures table, the
        other inputs' identities, the joined inputs' figures), and how many buckets the source has.
    """

    follows_segments = False
    completes_state = True

    def __init__(self) -> None:
        self.written: str | None = None  # the figures table this build wrote

    def precheck(self, build: PartitionBuild) -> Fallback | None:
        from strata_dagster.engine.builds.incremental import Fallback

        previous = build.previous.detail
        if build.previous.model_fingerprint != build.ctx.fingerprint:
            return Fallback("the model's code changed since its last build")
        grain = partition_grain(build.ctx)
        if previous.get("strategy") != STRATEGY or previous.get("partition_grain") != grain:
            return Fallback("the previous state was not built by key buckets")
        problem = locality_problem(build.ctx)
        if problem is not None:
            return Fallback(problem)
        table = previous.get(BUCKET_FIGURES)
        if not table or not build.ctx.session.snapshot_exists(table):
            return Fallback("the previous build recorded no figures per key bucket")
        return None

    def joined_change(
        self, build: PartitionBuild, changed_inputs: list[str]
    ) -> joined_inputs.JoinedChange | Fallback:
        return joined_change(build, changed_inputs)

    def changed_partitions(self, build: PartitionBuild) -> list[str]:
        before = build.previous.detail[BUCKET_FIGURES]
        return changed_buckets(build.ctx, before, current_figures(build.ctx, raw_partition(build.ctx)))[0]

    def changed_slices(
        self, build: PartitionBuild, joined: joined_inputs.JoinedChange
    ) -> tuple[list[str], dict[str, Any], int | None]:
        from strata_dagster.engine.builds import joined_inputs

        ctx = build.ctx
        self.written = record(ctx, raw_partition(ctx))
        changed, total = changed_buckets(
            ctx, build.previous.detail[BUCKET_FIGURES], snapshot_table(self.written)
        )
        reached = joined.reached
        facts: dict[str, Any] = {
            BUCKET_FIGURES: self.written,
            "other_inputs": other_inputs(ctx, build.identities),
            joined_inputs.FIGURES: joined.figures,
        }
        if build.upstream_segments is not None:
            facts[UPSTREAM_SEGMENTS] = build.upstream_segments
        return sorted(set(changed) | reached), facts, total


class KeyBucketBuild:
    """A `PartitionBuild` by key buckets that drops the figures table it wrote when no new state
    records it (the live state kept, or a full build instead).

    Args:
        ctx, previous, segments, identities: as for `PartitionBuild`.
        changes: the key buckets whose source figures changed.
    """

    def __init__(
        self,
        ctx: IncrementalContext,
        previous: SnapshotRecord,
        segments: list[Segment],
        identities: dict[str, str],
        changes: ByKeyBuckets,
    ) -> None:
        self.session = ctx.session
        self.changes = changes
        self.partitions = PartitionBuild(ctx, previous, segments, identities, changes)

    def build(self) -> DeltaBuild | Fallback:
        from strata_dagster.engine.builds.segment import DeltaBuild

        result: DeltaBuild | Fallback | None = None
        try:
            result = self.partitions.build()
            return result
        finally:
            written = self.changes.written
            if written and (not isinstance(result, DeltaBuild) or result.is_unchanged):
                self.session.drop_snapshot(written)
