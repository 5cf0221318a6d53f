"""Dagster: a materialization of a model over a business-versioned source carries the source's
version (its last consumed partition), and the `strata_verify` job re-hashes the source's consumed
partitions against its ledger (`strata_source_ledger`)."""

import dagster as dg

from strata_dagster import build_definitions
from strata_dagster.orchestration.checks import VERIFY_JOB
from strata_dagster.orchestration.source_checks import LEDGER_CHECK
from strata_dagster_tests.business_support import day, make_table_project, write_table_partition
from strata_dagster_tests.dagster_support import execute_assets
from strata_dagster_tests.engine_support import sql


def _ledger_check(defs, instance) -> dg.AssetCheckEvaluation:
    result = defs.resolve_job_def(VERIFY_JOB).execute_in_process(instance=instance, raise_on_error=False)
    (evaluation,) = [
        event.event_specific_data
        for event in result.all_events
        if event.event_type_value == "ASSET_CHECK_EVALUATION"
        and event.event_specific_data.check_name == LEDGER_CHECK
    ]
    return evaluation


def test_materialization_metadata_names_the_last_consumed_partition_and_the_ledger_is_checked(tmp_path):
    project, warehouse = make_table_project(tmp_path)
    for index in range(2):
        write_table_partition(warehouse, index, 3)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    assert execute_assets(defs, instance, ["events_log"]).success
    record = instance.get_latest_data_version_record(dg.AssetKey("events_log"))
    metadata = record.event_log_entry.asset_materialization.metadata
    assert metadata["strata/source_versions"].value == {"events": day(1).isoformat()}
    assert _ledger_check(defs, instance).passed
    sql(warehouse, "UPDATE raw.events SET amount = amount + 1 WHERE id = 0")  # same count and range
    failed = _ledger_check(defs, instance)
    assert not failed.passed and day(0).isoformat() in failed.description
