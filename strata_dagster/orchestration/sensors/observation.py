"""What the stale sensor observes: only the sources whose content fingerprint differs from the
data version Dagster last recorded for them, and the `<model>__whole` companions whose model's
live content differs from theirs (a rollback, or a build made outside Dagster: the history
says so, no row is read).

The sensor reads the fingerprints itself, through a read-only connection that waits briefly for a
writer's lock, so an idle tick launches nothing: an observation run is launched only when a source
changed (or was never observed). A `versioning: cdc(col)` source costs milliseconds (row count and
the range of `col`, from DuckDB's statistics); a `versioning: full` one, a hash of its rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import dagster as dg

from strata_dagster.engine.sources.readings import peek_live_contents, peek_source_fingerprints
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.constants import LOCK_WAIT_SECONDS
from strata_dagster.orchestration.resources.strata import StrataResource


@dataclass(frozen=True)
class SourceCheck:
    """The observable assets to observe now, and why (one line per asset)."""

    to_observe: list[dg.AssetKey] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    unchanged: int = 0  # sources whose fingerprint equals their recorded data version


def check_sources(
    instance: dg.DagsterInstance,
    strata: StrataResource,
    observable: Mapping[dg.AssetKey, str | None],
    skip: set[dg.AssetKey],
    whole_models: Mapping[dg.AssetKey, str] | None = None,
) -> SourceCheck:
    """Compare each observable asset's current fingerprint (that of the source it maps to; for a
    companion in `whole_models`, its model's live content identity from the history; None: a
    companion its model's builds observe, checked for a first observation only) with its latest
    recorded data version. `skip`: assets a run is observing now. Raises StrataError (E021 when a
    run holds the warehouse)."""
    whole_models = whole_models or {}
    recorded: dict[dg.AssetKey, str | None] = {}
    for key in observable:
        if key in skip:
            continue
        record = instance.get_latest_data_version_record(key, is_source=True)
        tags = None if record is None else record.event_log_entry.tags
        if record is not None and tags is None:  # a data version's record is an observation's: never
            raise AttributeError("'NoneType' object has no attribute 'get'")
        recorded[key] = None if tags is None else tags.get(c.DATA_VERSION_TAG)
    names = sorted({name for key, name in observable.items() if key in recorded and name is not None})
    current = (
        peek_source_fingerprints(strata.project_path, strata.warehouse_path, names, timeout=LOCK_WAIT_SECONDS)
        if names
        else {}
    )
    models = sorted(
        {whole_models[key] for key in recorded if key in whole_models and recorded[key] is not None}
    )
    live = (
        peek_live_contents(strata.warehouse_path, models, strata.branch, timeout=LOCK_WAIT_SECONDS)
        if models
        else {}
    )
    check = SourceCheck()
    for key in sorted(recorded, key=str):
        name, version = observable[key], recorded[key]
        label = key.to_user_string()
        if version is None:
            check.to_observe.append(key)
            check.reasons.append(f"{label}: never observed")
        elif name is not None and current[name] != version:
            check.to_observe.append(key)
            check.reasons.append(f"{label}: fingerprint changed ({version[:12]} -> {current[name][:12]})")
        elif (content := live.get(whole_models.get(key, ""))) is not None and content != version:
            check.to_observe.append(key)
            check.reasons.append(f"{label}: live content changed ({version[:12]} -> {content[:12]})")
    return SourceCheck(check.to_observe, check.reasons, len(recorded) - len(check.to_observe))
