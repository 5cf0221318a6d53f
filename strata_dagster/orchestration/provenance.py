"""Materialization events a step logs itself, carrying the provenance Dagster's own events carry.

A ranged run of a partitioned model gives each partition its own data version (its content), which
Dagster's output handling cannot: it gives every partition of a run one version. So the IO manager
logs one materialization per partition itself, tagged exactly as Dagster tags its own (code
version, data version, and each input's data version and event pointer, which staleness reads),
and the asset's output carries the marker Dagster's observable source assets use to say "the
events were logged already".
"""

from __future__ import annotations

from typing import Final

import dagster as dg

# Dagster internals, pinned by the `dagster>=1.13,<1.14` requirement and covered by the tests in
# strata_dagster_tests/test_dagster_staleness.py: the same functions Dagster's own output events use.
from dagster._core.definitions.source_asset import SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION
from dagster._core.execution.plan.execute_step import _build_data_version_tags, _get_input_provenance_data
from dagster._core.storage.tags import BACKFILL_ID_TAG

from strata_dagster.orchestration.constants import DATA_VERSION_TAG

# Output metadata meaning "this step logged its asset events itself": Dagster then logs none.
EVENTS_LOGGED: Final = {SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION: True}


def materialization_tags(
    context: dg.OutputContext, asset_key: dg.AssetKey, data_version: str, code_version: str
) -> dict[str, str]:
    """The tags Dagster would put on this step's materialization of `asset_key`."""
    step_context = context.step_context
    inputs = _get_input_provenance_data(asset_key, step_context)
    tags = _build_data_version_tags(dg.DataVersion(data_version), code_version, inputs, True)
    backfill = step_context.get_tag(BACKFILL_ID_TAG)
    if backfill:
        tags[BACKFILL_ID_TAG] = backfill
    return tags


def known_data_version(instance: dg.DagsterInstance, key: dg.AssetKey) -> str | None:
    """The data version Dagster records for `key` now (latest materialization or observation)."""
    record = instance.get_latest_data_version_record(key)
    if record is None:
        return None
    entry = record.event_log_entry
    event = entry.asset_materialization or entry.asset_observation
    return (event.tags or {}).get(DATA_VERSION_TAG) if event is not None else None


def refresh_input_version(context: dg.OutputContext, key: dg.AssetKey) -> None:
    """Make this step's provenance read `key`'s latest event again (one logged during the step)."""
    context.step_context.wipe_input_asset_version_info(key)
