"""Dagster: a materialization of a model over a business-versioned source carries the source's
version (its last consumed partition)."""

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster_tests.business_support import day, make_file_project, write_file_partition
from strata_dagster_tests.dagster_support import execute_assets
from strata_dagster_tests.engine_support import execute


def test_materialization_metadata_names_the_last_consumed_partition(tmp_path):
    project, warehouse = make_file_project(tmp_path)
    for index in range(2):
        write_file_partition(project, index, 3)
    execute(warehouse, "SELECT 1")  # the warehouse exists before Dagster loads its definitions
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    assert execute_assets(defs, instance, ["events_log"]).success
    record = instance.get_latest_data_version_record(dg.AssetKey("events_log"))
    metadata = record.event_log_entry.asset_materialization.metadata
    assert metadata["strata/source_versions"].value == {"events": day(1).isoformat()}
