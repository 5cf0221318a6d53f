"""A model over a `sliding_window(N)` source: an aggregate kept from the window's weighted delta
(engine.builds.sliding_window), any other shape built in full over the window, and why."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from strata_dagster.backends.base import Session
from strata_dagster.engine.builds import sliding_window
from strata_dagster.engine.builds.delta import accepted
from strata_dagster.engine.builds.full import FullBuild, full_record
from strata_dagster.engine.builds.pins import check_pins
from strata_dagster.engine.builds.segment import DeltaBuild
from strata_dagster.engine.builds.strategy import Built, Relation, Target, as_build_error
from strata_dagster.engine.paths import DELTA, FULL, StrategyName
from strata_dagster.engine.sources.business import BusinessReading
from strata_dagster.sql.render import snapshot_table
from strata_dagster.state.history import SnapshotRecord


@dataclass
class WindowBuild:
    """An aggregate over a sliding window, kept from the partitions entering and leaving it.

    Args:
        target: what the build writes.
        session: the run's session.
        relation: what each input is read from in this run.
        source: the sliding-window source the model reads.
        reading: that source's reading in this run (its window, ledger and columns).
        current: the live state (None: first build, or a table of it went missing).
        is_partitioned: a partitioned model is built in full over the window.
        is_refresh: `--full-refresh` of this model.
        snapshot_tables: the snapshot tables of the branch's catalog (the window state must be one).
        full: the model's full build, for a shape the weighted delta cannot keep.
        is_partial: only the partitions requested by name are rebuilt: no build key names the state.

    Returns (from `build`):
        Built: the weighted delta's state ("delta"), the live state kept ("cutoff"), or a full
        build ("full") with its `full_reason`.
    """

    strategy: ClassVar[StrategyName] = "sliding_window"

    target: Target
    session: Session
    relation: Relation
    source: str
    reading: BusinessReading
    current: SnapshotRecord | None
    is_partitioned: bool
    is_refresh: bool
    snapshot_tables: frozenset[str]
    full: FullBuild
    is_partial: bool = False

    def build(self) -> Built:
        target, session, source, reading, current = (
            self.target,
            self.session,
            self.source,
            self.reading,
            self.current,
        )
        compiled, table_name = target.compiled, target.table_name
        shape = sliding_window.shape_of(compiled, source)
        if isinstance(shape, str) or self.is_partitioned:
            reason: str | None = (
                shape
                if isinstance(shape, str)
                else f"a partitioned model over `{source}` builds in full over the window"
            )
            return replace(
                self.full.build(), detail={"full_reason": f"`{source}` is a sliding window: {reason}"}
            )
        maintained = sliding_window.WindowAggregate(
            session,
            compiled,
            shape,
            self.relation,
            source,
            reading.window,
            reading.columns,
            reading.partitions_relation,
        )
        reason = "first build" if current is None else None
        if self.is_refresh:
            reason = "full refresh requested"
        elif reading.reset_reason is not None:
            reason = f"source `{source}` starts a new partition ledger ({reading.reset_reason})"
        elif current is not None:
            consumed = {item.key for item in reading.consumed}
            reason = maintained.precheck(current, target.fingerprint, consumed, self.snapshot_tables)
        if reason is None:
            assert current is not None
            with as_build_error(target.model):
                build = maintained.delta(current, target.snapshot_id, table_name, target.entry)
            if isinstance(build, DeltaBuild):
                return accepted(session, target.model, build, DELTA, self.is_partial)
            reason = build.reason
        with as_build_error(target.model):
            session.create_snapshot(table_name, compiled.bound(self.relation))
            check_pins(session, target.model, table_name)
            maintained.full(table_name)
            content = session.content(snapshot_table(table_name))
        record = full_record(target, content, maintained.detail(table_name, content.columns))
        return Built(record, FULL, {"full_reason": reason})
