"""What a run reads before it decides anything, and the facts its decisions and builds share.

`RunScope` is the reading half of `strata run` and `strata plan`: the selection and its upstream
closure, how each plain model is maintained (row-wise, or from its input models' segments), the
sources' states, business-driven readings and totals, the catalog, and the branch's pointers. It
writes nothing. Its caches (a source's rows grouped per partition, scanned when the model cut like
it first builds; window figures already read) fill on first use, so a run scans each source as
often, and in the same order, as before there was a scope. `chosen` is the one part that grows as
the run goes: each model's state as this run leaves it, filled in dependency order by whoever
builds (or plans) the models.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from strata_dagster.backends.base import Session, WarehouseError
from strata_dagster.backends.duckdb.sources import source_table
from strata_dagster.compile.relations import branch_schema
from strata_dagster.engine.builds import key_bucket_figures, partitions
from strata_dagster.engine.builds.key_buckets import source_key
from strata_dagster.engine.builds.model_slices import (
    Maintained,
    ModelSlices,
    UpstreamChange,
    follower_slices,
    partitioned_over_model,
    slicing,
    upstream_change,
)
from strata_dagster.engine.builds.partitions import UPSTREAM_SEGMENTS
from strata_dagster.engine.builds.row_wise import ROW_WISE, RowWise, is_plain, row_wise
from strata_dagster.engine.context import ProjectContext, select_models, with_upstream
from strata_dagster.engine.decisions.definition import RunRequest
from strata_dagster.engine.decisions.removed import removed_models
from strata_dagster.engine.decisions.view_lineage import source_partition_through_views
from strata_dagster.engine.partition_keys import parse_partitions
from strata_dagster.engine.sources.logs import (
    LogSource,
    history_keys,
    history_relation,
    log_source,
    table_history_error,
)
from strata_dagster.engine.sources.readings import (
    SourceState,
    fingerprint_models,
    read_source_state,
    read_source_state_by_figures,
    read_source_state_by_group,
)
from strata_dagster.fingerprint import ModelFingerprint
from strata_dagster.fingerprint.refresh import utc_now
from strata_dagster.language.definition import INCREMENTAL_STRATEGIES, Model
from strata_dagster.sql.content import EMPTY_FIGURE, WHOLE_ROW, RowBasis
from strata_dagster.sql.render import snapshot_table
from strata_dagster.sql.segments import KEY_GRAINS, Segment, WindowStats
from strata_dagster.state.history import SnapshotRecord
from strata_dagster.state.states import segments_of, state_query

if TYPE_CHECKING:
    # Imported where used: a run that builds nothing and reads no such source needs neither.
    from strata_dagster.engine.builds.strategy import IncrementalContext
    from strata_dagster.engine.sources import business


class RunScope:
    """What one run (or plan) of `request` reads, and what its models hold as it goes."""

    def __init__(self, session: Session, context: ProjectContext, request: RunRequest) -> None:
        self.session = session
        self.context = context
        self.request = request
        self.reader = session.history
        self.project = context.project
        self.selected = select_models(self.project, request.models)
        self.closure = with_upstream(self.project, self.selected)
        self.schema = branch_schema(context.branch)
        self.fingerprints: dict[str, ModelFingerprint] = fingerprint_models(context)
        self.now = request.now or utc_now()
        self.partition_requests = parse_partitions(request.partitions)
        # Filled by `read_requested` and `read`:
        self.requested: dict[str, tuple[str, ...]] = {}  # model -> the partition keys to rebuild
        self.sources: dict[str, SourceState] = {}
        self.source_totals: dict[str, tuple[int, str]] = {}
        self.business: dict[str, business.BusinessReading] = {}  # business-versioned sources read
        self.logs: dict[str, LogSource] = {}  # sources read through their ledger or change feed
        self.history_keys: dict[str, tuple[str, ...]] = {}  # a history model's: the keys it versions
        self.pointers: dict[str, tuple[str, ...]] = {}  # model -> the segment ids its live view shows
        self.removed: tuple[str, ...] = ()  # models with a live view the project no longer defines
        # Each model's state as the run leaves it (what its readers read), in dependency order.
        self.chosen: dict[str, SnapshotRecord] = {}
        self.partition_groups: dict[str, dict[str | None, tuple[int, str]]] = {}
        self.lazy_partition_groups: dict[str, Callable[[], dict[str | None, tuple[int, str]]]] = {}
        self.window_stats_read: dict[tuple[str, ...], WindowStats] = {}
        # model -> its source's figures per key bucket, held by the read of the source
        self.held_source_figures: dict[str, tuple[str, exp.Table]] = {}
        self._entry: int | None = None
        # Plain models of the closure: how each is maintained row-wise, or why it is not; and
        # every model maintained from its input models' new segments (engine.builds.model_slices).
        self.row_wise: dict[str, Maintained] = {}
        self.followed: dict[str, ModelSlices] = {}
        for name in self.closure:
            model, compiled = self.project.models[name], context.compiled.models[name]
            if is_plain(model) and compiled.base_relation in self.project.models:
                self.row_wise[name] = slicing(self.project, compiled, model, self.row_wise)
            elif is_plain(model):
                base = compiled.base_relation
                key = (
                    source_key(self.project, context.compiled.models, base)
                    if base in self.project.sources
                    else None
                )
                self.row_wise[name] = row_wise(
                    self.project,
                    compiled,
                    model,
                    self.types,
                    key,
                    session.capabilities.slices_by_key_buckets,
                )
            over_model = self.row_wise.get(name) or partitioned_over_model(
                self.project, compiled, model, self.row_wise
            )
            if isinstance(over_model, ModelSlices):
                self.followed[name] = over_model
        self.as_built: dict[str, Model] = {
            name: maintained.as_partitioned(self.project.models[name])
            for name, maintained in self.row_wise.items()
            if isinstance(maintained, (RowWise, ModelSlices)) and maintained.spec is not None
        }
        models_as_built = {name: self.model(name) for name in self.followed}
        self.follower_slices = follower_slices(models_as_built, context.compiled.models, self.followed)

    # -- reading ------------------------------------------------------------------------------------
    def read_requested(self) -> None:
        """The partitions `--partitions` names, per model: read before the run's transaction, so
        that a failed probe of the data does not abort it."""
        if not self.partition_requests:
            self.requested = {}  # none named: nothing to probe
            return
        from strata_dagster.engine.builds.partition_range import requested_partitions

        self.requested = requested_partitions(
            self.session, self.context, self.selected, self.partition_requests, self.now.date()
        )

    def read(self) -> None:
        """The catalog of the branch, and the state of every source the closure reads."""
        self.catalog = self.session.catalog(self.schema)
        self.sources = self.read_sources()
        self.check_history_models()
        self.source_totals = {
            state.relation: (state.row_count, state.row_hash_sum)
            for state in self.sources.values()
            if state.row_hash_sum is not None
        }
        self.fingerprints = {name: self.fingerprints[name] for name in self.closure}

    def read_pointers(self, *, has_history: bool = True) -> dict[str, tuple[str, ...]]:
        """What the branch's live views show now (none without history), and the models whose live
        view the project no longer defines (engine.decisions.removed)."""
        self.pointers = self.reader.pointers(self.context.branch) if has_history else {}
        self.removed = removed_models(self.reader, self.pointers, self.project)
        return self.pointers

    def check_history_models(self) -> None:
        """Refuses a history model of the closure that does not read a log by keys it can version."""
        for name in self.closure:
            if self.project.models[name].properties.merge_strategy == "history":
                self.history_keys[name] = self._history_keys(name)

    def _history_keys(self, name: str) -> tuple[str, ...]:
        model, compiled = self.project.models[name], self.context.compiled.models[name]
        base = compiled.base_relation
        traced = tuple(compiled.base_column(key) for key in model.properties.merge_keys or ())
        is_source = base in self.project.sources
        keys = history_keys(model, base, traced, self.logs.get(base), is_source=is_source)
        if base not in self.logs:
            columns = {column: compiled.base_column(column) for column in compiled.columns or ()}
            error = table_history_error(model, base, columns, self.session.backend)
            if error is not None:
                raise error
        return keys

    def is_table_history(self, name: str) -> bool:
        """Whether `name` is a history model over a plain table (engine.builds.table_history)."""
        return name in self.history_keys and self.context.compiled.models[name].base_relation not in self.logs

    @property
    def history_at(self) -> exp.Expr:
        """The time a history over a plain table stamps this run's versions with (UTC)."""
        moment = self.now.astimezone(dt.timezone.utc).replace(tzinfo=None) if self.now.tzinfo else self.now
        return exp.cast(exp.Literal.string(moment.isoformat(sep=" ")), "TIMESTAMP")

    def read_sources(self) -> dict[str, SourceState]:
        references = {ref for name in self.closure for ref in self.project.models[name].references}
        needed = sorted(references & set(self.project.sources))
        states = {}
        for name in needed:
            log = log_source(self.session, self.project, self.context.overrides, name)
            if log is not None:
                self.logs[name] = log
            if self.project.sources[name].is_business_versioned and name not in self.context.overrides:
                states[name] = self._read_business_source(name)
                continue
            reader = self.partitioned_reader_of(name)
            bucketed = self.bucketed_readers_of(name) if reader is None else []
            if bucketed:
                # The figures per key bucket the models' builds compare, from the scan that gives
                # the source's own fingerprint (they add up to it).
                bucket = bucketed[0][1]

                def figures(relation: exp.Table, basis: RowBasis, bucket: exp.Expr = bucket) -> exp.Query:
                    return key_bucket_figures.figures_of(relation, bucket, basis)

                states[name], held = read_source_state_by_figures(
                    self.session,
                    self.context,
                    name,
                    figures,
                    (key_bucket_figures.ROWS, key_bucket_figures.HASH_SUM),
                )
                if held is not None:
                    # Each model takes them only where its own figures query is the one they answer
                    # (key_bucket_figures.current_figures): two models sliced alike share one scan.
                    for model, _ in bucketed:
                        self.held_source_figures[model] = held
                continue
            if reader is None:
                states[name] = read_source_state(self.session, self.context, name)
                continue
            # The model's partition fingerprints, scanned when it builds (with the source's own
            # fingerprint in the same scan where their figures add up).
            grouped_by, key = reader
            states[name], self.lazy_partition_groups[grouped_by] = read_source_state_by_group(
                self.session, self.context, name, key
            )
        return states

    def _read_business_source(self, name: str) -> SourceState:
        """A business-versioned source: its ledger checked and advanced, its version its partitions'
        evidence; a partitioned model cut like it compares that evidence, no row read."""
        from strata_dagster.engine.sources import business  # read only for a business-versioned source

        reading = business.read_business_source(
            self.session, self.context, name, is_full_refresh=self.request.full_refresh
        )
        self.business[name] = reading
        reader = None if reading.is_sliding else self.partitioned_reader_of(name)
        if reader is not None and business.is_cut_like_source(
            self.project.models[reader[0]],
            self.context.compiled.models[reader[0]],
            self.project.sources[name],
        ):
            # Grouped only when the model builds: a run that reuses it never needs them.
            grain = partitions.partition_grain(self.project.models[reader[0]])
            self.lazy_partition_groups[reader[0]] = lambda: business.partition_groups(reading, grain)
        return SourceState(
            name,
            business.describe_relation(reading),
            reading.fingerprint,
            reading.row_count,
            # The ledger's row count is the relation's: an append model's window gate subtracts
            # from it instead of counting every consumed file again (no sum on a column basis).
            EMPTY_FIGURE,
            reading.basis,
        )

    def partitioned_reader_of(self, source: str) -> tuple[str, exp.Expr] | None:
        """A partitioned model in the selection that reads `source` as its `from` (itself, or
        through view models), if any, and its partition expression over the source's rows."""
        for name in self.closure:
            model = self.model(name)
            compiled = self.context.compiled.models[name]
            if not self.is_partitioned(name) or partitions.partition_grain(model) in KEY_GRAINS:
                continue  # a model sliced by key buckets writes its figures to a table
            if compiled.base_relation == source and partitions.locality_problem_of(model, compiled) is None:
                return name, partitions.raw_partition_of(model, compiled)
            traced = source_partition_through_views(self.project, self.context.compiled.models, name)
            if traced is not None and traced[0] == source:
                return name, traced[1]
        return None

    def bucketed_readers_of(self, source: str) -> list[tuple[str, exp.Expr]]:
        """The models in the selection sliced by the key buckets of `source`, their `from`, each
        with its bucket expression over the source's rows."""
        readers = []
        for name in self.closure:
            model = self.model(name)
            compiled = self.context.compiled.models[name]
            if not self.is_partitioned(name) or partitions.partition_grain(model) not in KEY_GRAINS:
                continue
            if compiled.base_relation == source and partitions.locality_problem_of(model, compiled) is None:
                readers.append((name, partitions.raw_partition_of(model, compiled)))
        return readers

    @property
    def entry(self) -> int:
        """The history entry this run records, read when first needed: a run that builds nothing
        records nothing (the writer's lock is held: no other run takes the number meanwhile)."""
        if self._entry is None:
            self._entry = self.reader.next_entry()
        return self._entry

    def assume_entry(self, entry: int) -> None:
        """Plan as if the run recorded history entry `entry` (a plan records none)."""
        self._entry = entry

    # -- models -------------------------------------------------------------------------------------
    def types(self, source: str) -> dict[str, str]:
        """A source's column types (none when it cannot be read: the run fails where it reads it)."""
        relation = source_table(self.project.sources[source], self.project, self.context.overrides)
        try:
            return dict(self.session.describe(relation))
        except WarehouseError:
            return {}  # an unreadable source fails the run where it is read, with its own error

    def model(self, name: str) -> Model:
        """A model as it is built: a row-wise one as partitioned by its implicit slicing."""
        return self.as_built.get(name) or self.project.models[name]

    def is_partitioned(self, name: str) -> bool:
        props = self.model(name).properties
        return props.partitioned_by is not None and props.merge_strategy not in INCREMENTAL_STRATEGIES

    def is_incremental(self, name: str) -> bool:
        """Whether the model builds on its live state (by deltas, partitions or slices)."""
        model = self.project.models[name]
        return (
            model.properties.merge_strategy in INCREMENTAL_STRATEGIES
            or self.is_partitioned(name)
            or name in self.followed
        )

    def is_refreshed(self, name: str) -> bool:
        """Whether `--full-refresh` rebuilds the model from all of its input."""
        return self.request.full_refresh and name in self.selected

    def sliding_source_of(self, name: str) -> str | None:
        """The `sliding_window(N)` source the model reads, if any (engine.builds.sliding_window)."""
        return next(
            (
                ref
                for ref in self.project.models[name].references
                if ref in self.business and self.business[ref].is_sliding
            ),
            None,
        )

    def row_wise_detail(self, name: str, detail: dict[str, object]) -> dict[str, object]:
        """A row-wise model's build detail names its slicing (what history explains it by)."""
        maintained = self.row_wise.get(name)
        if isinstance(maintained, (RowWise, ModelSlices)):
            return {**detail, ROW_WISE: maintained.text}
        return detail

    # -- inputs -------------------------------------------------------------------------------------
    def base_basis(self, name: str) -> RowBasis:
        """What the run hashed the rows of `name`'s `from` source over (whole rows for a model)."""
        state = self.sources.get(self.context.compiled.models[name].base_relation)
        return WHOLE_ROW if state is None else state.row_basis

    def relations_for(self, model: str) -> Callable[[str], exp.Table | exp.Query]:
        """What a build of `model` in this run reads each input from: a history model reads its
        change feed's versions, any other model its current rows."""
        from strata_dagster.engine.sources.versions import stamped_rows

        if self.project.models[model].properties.merge_strategy != "history":
            return self.relation_for_build
        base = self.context.compiled.models[model].base_relation
        if base not in self.logs:
            flag = self.project.models[model].properties.deleted_flag
            stamped = stamped_rows(self.relation_for_build(base), self.history_at, flag)
            return lambda name: stamped if name == base else self.relation_for_build(name)
        versions = history_relation(self.project.models[model], self.history_keys[model], self.logs[base])
        return lambda name: versions if name == base else self.relation_for_build(name)

    def relation_for_build(self, name: str) -> exp.Table | exp.Query:
        """What a build in this run reads input `name` from."""
        if name in self.business:
            return self.business[name].relation
        if name in self.logs:
            return self.logs[name].relation()
        if name in self.project.sources:
            return source_table(self.project.sources[name], self.project, self.context.overrides)
        record = self.chosen[name]
        segments = self.segments(record)
        if len(segments) == 1:
            return snapshot_table(segments[0].table)
        return state_query(self.reader, record)

    def segments(self, record: SnapshotRecord) -> list[Segment]:
        return segments_of(self.reader, record)

    def identities(self, name: str) -> dict[str, str]:
        """What each input of a model holds in this run: content fingerprints, never names."""
        return {
            ref: self.sources[ref].fingerprint if ref in self.sources else self.chosen[ref].content_hash
            for ref in self.project.models[name].references
        }

    def source_identity(self, name: str, source: str) -> str:
        """A source's identity as model `name` consumes it: its content, and for a view model also
        the relation an override points it at, since the view keeps reading that relation (an
        identical override must not let a later run reuse a view bound to the override's table)."""
        fingerprint = self.sources[source].fingerprint
        override = self.context.overrides.get(source)
        if override is None or not self.project.models[name].properties.is_view:
            return fingerprint
        return f"{fingerprint}@{override}"

    def replaced_sources(self, name: str) -> list[str]:
        """The sources upstream of `name` (transitively) that this run reads through an override
        replacing their rows."""
        upstream = with_upstream(self.project, [name])
        return sorted(
            {
                ref
                for model in upstream
                for ref in self.project.models[model].references
                if ref in self.sources and self.sources[ref].is_replaced
            }
        )

    def upstream_changes(self, name: str, current: SnapshotRecord) -> list[UpstreamChange] | str:
        """What each input model `name` follows gained since its live state was built."""
        recorded = current.detail.get(UPSTREAM_SEGMENTS) or {}
        changes = []
        for ref in self.followed[name].inputs:
            change = upstream_change(
                self.reader, ref, recorded.get(ref), self.chosen[ref], self.session.snapshot_exists
            )
            if isinstance(change, str):
                return change
            changes.append(change)
        return changes

    def upstream_segments(self, name: str) -> dict[str, list[str]]:
        """The segment ids of each input model `name` follows, as this run leaves them."""
        return {ref: list(self.chosen[ref].segment_ids) for ref in self.followed[name].inputs}

    def incremental_context(self, name: str, snapshot_id: str, table_name: str) -> IncrementalContext:
        """What a build of `name` into `table_name` needs of this run (its partition groups are
        scanned now, the first time a build asks)."""
        from strata_dagster.engine.builds.strategy import IncrementalContext

        if name in self.lazy_partition_groups and name not in self.partition_groups:
            self.partition_groups[name] = self.lazy_partition_groups[name]()
        return IncrementalContext(
            self.session,
            self.model(name),
            self.context.compiled.models[name],
            self.relations_for(name),
            self.fingerprints[name].value,
            snapshot_id,
            table_name,
            self.entry,
            self.partition_groups.get(name),
            self.source_totals,
            self.base_basis(name),
            self.window_stats_read,
            self.follower_slices.get(name, {}),
            self.logs.get(self.context.compiled.models[name].base_relation),
            self.held_source_figures.get(name),
        )

    def narrowed(self, context: IncrementalContext, current: SnapshotRecord) -> IncrementalContext:
        """The delta's context, reading a business-versioned folder's needed files by name."""
        from strata_dagster.engine.builds.business_delta import narrowed_context
        from strata_dagster.engine.sources import business

        name = context.model.name
        base = context.compiled.base_relation
        reading = self.business.get(base)
        if reading is None or name in self.requested:
            return context
        source = self.project.sources[base]
        is_cut_like = business.is_cut_like_source(context.model, context.compiled, source)
        return narrowed_context(context, reading, source, current.detail, current.watermark, is_cut_like)
