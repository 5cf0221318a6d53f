"""A live state's inputs (engine.reads.partition_status.live_states) are those of the build it stands
for: after a rollback, the entry the rollback restored, not a later run that kept the same state."""

from strata_dagster.engine.commands.operations import rollback
from strata_dagster.engine.reads.partition_status import live_states
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, execute, make_shop


def test_a_state_kept_by_an_early_cutoff_reads_the_restored_inputs_after_a_rollback(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=300)
    first = run_project(project, warehouse)
    before = live_states(warehouse, ["stg_orders", "order_tags"])
    order = execute(warehouse, "SELECT min(order_id) FROM raw.orders WHERE status = 'paid'")[0][0]
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id = ?",
        params=[order],
    )
    second = run_project(project, warehouse, only_stale=True)
    assert second.outcome("order_tags").path == "cutoff"  # an amount is not a tag: the same state
    kept = live_states(warehouse, ["stg_orders", "order_tags"])
    assert kept["order_tags"].snapshot_id == before["order_tags"].snapshot_id
    assert (
        kept["order_tags"].inputs["stg_orders"]
        == kept["stg_orders"].content_hash
        != before["stg_orders"].content_hash
    )
    rollback(warehouse, first.run_id)
    after = live_states(warehouse, ["stg_orders", "order_tags"])
    assert after["stg_orders"].content_hash == before["stg_orders"].content_hash
    assert after["order_tags"].snapshot_id == before["order_tags"].snapshot_id
    assert after["order_tags"].inputs == before["order_tags"].inputs
