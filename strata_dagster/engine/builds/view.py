"""A `materialize: view` model's build: a new immutable view over its inputs, no rows stored."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from strata_dagster.backends.base import Session
from strata_dagster.compile.determinism import effective_refresh
from strata_dagster.engine.builds.pins import check_contract
from strata_dagster.engine.builds.strategy import Built, Relation, Target, as_build_error
from strata_dagster.engine.paths import CUTOFF, UNPARTITIONED, VIEW, StrategyName
from strata_dagster.faults import checkpoint
from strata_dagster.fingerprint import digest, view_identity
from strata_dagster.state.history import MATERIALIZE_KEY, READS_KEY, SnapshotRecord


@dataclass
class ViewBuild:
    """A view model's state: a view whose identity comes from the build key (its definition and
    its inputs' identities), never from hashing its rows. A present view with that identity (the
    live one, or the one the key names) is kept instead: early cutoff without reading a row.

    Args:
        target: what the build writes.
        session: the run's session.
        relation: what each input is read from in this run.
        current: the live state; existing: the present state the build key names, if any.
        inputs: each input model's state as the run leaves it (the segments the view reads).
        is_refresh: `--full-refresh` of this model.
        is_state_present: whether a state is there to keep.

    Returns (from `build`):
        Built: a new view ("view"), or a present one with the same identity ("cutoff",
        `is_new=False`), its contract checked either way.
    """

    strategy: ClassVar[StrategyName] = "view"

    target: Target
    session: Session
    relation: Relation
    current: SnapshotRecord | None  # the live state
    existing: SnapshotRecord | None  # the state the build key names, if present
    inputs: Mapping[str, SnapshotRecord]  # each input model's state as the run leaves it
    is_refresh: bool  # `--full-refresh`: rebuilt whatever its identity (the way to repair a broken one)
    is_state_present: Callable[[SnapshotRecord | None], bool]

    def build(self) -> Built:
        target = self.target
        model = target.model
        content_hash = view_identity(target.key)
        if effective_refresh(model) == "always":
            # Its rows change with the clock while its inputs do not: a new identity every run, so
            # its readers are rebuilt (and cut off when their rows come out equal).
            content_hash = view_identity(digest(target.key, "entry", target.entry))
        for same in () if self.is_refresh else (self.existing, self.current):
            if same is not None and same.content_hash == content_hash and self.is_state_present(same):
                check_contract(
                    self.session, model, same.table_name
                )  # a contract edit does not change the key
                return Built(same, CUTOFF, is_new=False)
        query = target.compiled.bound(self.relation)
        with as_build_error(model):
            self.session.create_view_snapshot(target.table_name, query)
        checkpoint("snapshot_created")
        check_contract(self.session, model, target.table_name)  # `not null` is refused on views
        reads = sorted(
            {
                segment_id
                for ref in model.references
                if ref in self.inputs
                for segment_id in self.inputs[ref].segment_ids
            }
        )
        record = SnapshotRecord(
            snapshot_id=target.snapshot_id,
            model=model.name,
            table_name=target.table_name,
            partition_key=UNPARTITIONED,
            model_fingerprint=target.fingerprint,
            content_hash=content_hash,
            row_count=0,  # not counted: counting reads every row, which a view exists to avoid
            watermark=None,
            created_entry=target.entry,
            detail={MATERIALIZE_KEY: "view", READS_KEY: reads},
        )
        return Built(record, VIEW)
