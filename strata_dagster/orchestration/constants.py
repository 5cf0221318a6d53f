"""Names the Dagster layer shares with users: resource keys, the pool, tag and metadata keys."""

from __future__ import annotations

from typing import Final

# Resource keys, job, op, sensor and schedule names are a project's own: orchestration.naming.

# Every asset and observation that opens the warehouse runs in this pool. DuckDB allows one writer
# per file: with the pool's limit at 1 (dagster.yaml: concurrency.pools.default_limit), concurrent
# runs take turns instead of failing on the file lock.
DUCKDB_POOL: Final = "duckdb"
# How long a sensor's tick waits for a run's write lock on the warehouse before skipping: short, so
# the tick stays well within Dagster's budget and the run is never kept waiting behind it for long.
LOCK_WAIT_SECONDS: Final = 1.0

# The tags Dagster reads a materialization's or observation's versions from (its data versions
# documentation), spelled out once here. A step that logs its own events (one per partition, each
# with its own data version) writes the provenance Dagster's staleness reads: the code version, and
# for each input its data version and the storage id of the event it was read from (those two
# prefixes are Dagster's event-log format, not a documented API: test_dagster_public_api.py fails if
# Dagster renames them).
DATA_VERSION_TAG: Final = "dagster/data_version"
CODE_VERSION_TAG: Final = "dagster/code_version"
DATA_VERSION_IS_USER_PROVIDED_TAG: Final = "dagster/data_version_is_user_provided"
INPUT_DATA_VERSION_TAG_PREFIX: Final = "dagster/input_data_version"
INPUT_EVENT_POINTER_TAG_PREFIX: Final = "dagster/input_event_pointer"
NULL_EVENT_POINTER: Final = "NULL"
BACKFILL_ID_TAG: Final = "dagster/backfill"
# Dagster's run tags of a ranged run (a single-run backfill policy's run, a partition range).
RANGE_START_TAG: Final = "dagster/asset_partition_range_start"
RANGE_END_TAG: Final = "dagster/asset_partition_range_end"

# The tag that marks a partitions companion (`<model>__by_<grain>`, see orchestration.assets.companions).
COMPANION_TAG: Final = "strata/companion"
# Tags of a model rebuilt by its refresh period (`refresh:`, or `always` for a volatile model
# without one), and of one that calls a volatile function (now(), random(), ...).
REFRESH_TAG: Final = "strata/refresh"
VOLATILE_TAG: Final = "strata/volatile"
PARTITIONS_COMPANION: Final = "partitions"
# The kind every companion also has: `AssetSelection.kind` selects it, sources included, without
# the beta `include_sources` of `AssetSelection.tag` (a BetaWarning on every load).
COMPANION_KIND: Final = "strata_companion"

# Run tags read by the Dagster layer. A backfill run needs a reason; it may correct a recorded
# strata run and point sources at corrected tables (`strata/source/orders` = `fixes.orders`).
REASON_TAG: Final = "strata/reason"
BACKFILL_OF_TAG: Final = "strata/backfill_of"
SOURCE_TAG_PREFIX: Final = "strata/source/"
# `true` on a backfill run: rebuild its models from all their input, like `--full-refresh`.
FULL_REFRESH_TAG: Final = "strata/full_refresh"
FULL_REFRESH_VALUES: Final = {"true": True, "false": False}

# Runs the `strata_materialize_stale` sensor launches say what they are for (`observe`: record
# the sources' new fingerprints; `rebuild`: materialize stale assets) and why (`strata/why`).
PURPOSE_TAG: Final = "strata/purpose"
PURPOSE_OBSERVE: Final = "observe"
PURPOSE_REBUILD: Final = "rebuild"
WHY_TAG: Final = "strata/why"
STALE_PARTITIONS_TAG: Final = "strata/stale_partitions"

# The tag on each wave's run of `strata_materialize_all` and `strata_backfill_range`
# (orchestration.jobs.one_run) naming the run that launched it.
LAUNCHED_BY_TAG: Final = "strata/launched_by"

# Metadata keys on definitions and materializations.
MODEL_KEY: Final = "strata/model"
SOURCE_KEY: Final = "strata/source"
MODULE_KEY: Final = "strata/module"
PARTITIONED_BY_KEY: Final = "strata/partitioned_by"
RUN_ID_KEY: Final = "strata/run_id"
BUILT_BY_RUN_KEY: Final = (
    "strata/built_by_run"  # a reused snapshot's builder (the step's engine run built nothing)
)
PARTITION_ROW_COUNT_KEY: Final = "dagster/partition_row_count"
SNAPSHOT_KEY: Final = "strata/snapshot"
TABLE_KEY: Final = "strata/table"
PATH_KEY: Final = "strata/path"
ROWS_KEY: Final = "strata/rows"
DURATION_KEY: Final = "strata/duration_ms"
SQL_KEY: Final = "strata/sql"
DETAIL_KEY: Final = "strata/detail"
PARTITION_RECOMPUTED_KEY: Final = "strata/partition_recomputed"
# On a partitioned model's output events: the partition's own event (its content version) follows.
VERSIONS_FOLLOW_KEY: Final = "strata/versions"
FINGERPRINT_KEY: Final = "strata/fingerprint"
RELATION_KEY: Final = "strata/relation"
UNIQUE_KEY: Final = "strata/unique"
CONTRACT_KEY: Final = "strata/contract"
KIND_KEY: Final = "strata/kind"
REASON_KEY: Final = "strata/reason"
# The engine's explanation of the path a build took, in `strata history`'s and `strata plan`'s words.
WHY_KEY: Final = "strata/why"
BACKFILL_OF_KEY: Final = "strata/backfill_of"
OVERRIDES_KEY: Final = "strata/overrides"
FULL_REFRESH_KEY: Final = "strata/full_refresh"
# Business-versioned sources a build read: each one's last consumed partition (its version).
SOURCE_VERSIONS_KEY: Final = "strata/source_versions"
COMPANION_OF_KEY: Final = "strata/companion_of"
READERS_KEY: Final = "strata/readers"
REFRESH_KEY: Final = "strata/refresh"
# Publication to Iceberg (docs/iceberg.md): the model's table and, per materialization, its snapshot.
ICEBERG_TABLE_KEY: Final = "strata/iceberg_table"
ICEBERG_SNAPSHOT_KEY: Final = "strata/iceberg_snapshot_id"
ICEBERG_KIND: Final = "iceberg"
VOLATILE_CALLS_KEY: Final = "strata/volatile_calls"

# Dagster's own metadata keys (its documented `dagster/...` keys), spelled out once here.
COLUMN_SCHEMA_KEY: Final = "dagster/column_schema"
COLUMN_LINEAGE_KEY: Final = "dagster/column_lineage"
CODE_REFERENCES_KEY: Final = "dagster/code_references"
TABLE_NAME_KEY: Final = "dagster/table_name"
ROW_COUNT_KEY: Final = "dagster/row_count"
KIND_TAG_PREFIX: Final = "dagster/kind/"

# Metadata of a refused run's event (orchestration.jobs.executor).
ERROR_CODE_KEY: Final = "strata/error_code"
ERROR_KEY: Final = "strata/error"
HINT_KEY: Final = "strata/hint"
LOCATION_KEY: Final = "strata/location"  # a StrataError's file:line:col on a failed step
WRITTEN_KEY: Final = "strata/written"

# Dagster's backfill daemon iterates every 30 s: a constant of Dagster's, not an instance setting
# (the shipped dagster.yaml's 1 s is the run queue's `dequeue_interval_seconds`).
BACKFILL_DAEMON_SECONDS: Final = 30
BACKFILL_DAEMON_WAIT: Final = (
    f"the backfill daemon's next iteration (every {BACKFILL_DAEMON_SECONDS} s, fixed in Dagster; "
    "the shipped 1 s is the run queue's)"
)
