"""`materialize: view`: a model whose snapshot is an immutable view over its inputs, no rows stored.

Its identity comes from its inputs' identities, so staleness, early cutoff, rollback, branches,
gc and verify work on it as on table snapshots, while a build costs nothing."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from strata_dagster.backends.opening import open_session
from strata_dagster.cli.main import main
from strata_dagster.engine.commands import operations
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.commands.replay import replay
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.paths import CUTOFF, FULL, REUSED, VIEW
from strata_dagster.engine.reads.partition_status import read_model
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project
from strata_dagster_tests.support.engine_support import (
    edit_module,
    execute,
    make_module_project,
    row_multiset,
    snapshot_relations,
)

MODULE = """
source orders { table: raw.orders }

model stg_orders {
  from orders
  filter status <> 'cancelled'
  derive amount_eur = amount * 0.9
  materialize: view
  contract: {order_id: BIGINT, amount_eur: DECIMAL(14, 3)}
}

model totals {
  from stg_orders
  group status
  aggregate revenue = sum(amount_eur), n = count(*)
}
"""
ORDERS = (
    "CREATE OR REPLACE TABLE raw.orders AS SELECT range AS order_id, "
    "CASE WHEN range % 5 = 0 THEN 'cancelled' WHEN range % 2 = 0 THEN 'paid' ELSE 'open' END AS status, "
    "CAST(range % 40 + 1 AS DECIMAL(12, 2)) AS amount FROM range(200)"
)


def make_views(root: Path, module: str = MODULE) -> tuple[Path, Path]:
    return make_module_project(root, "m.strata", module, ORDERS)


def snapshot_objects(warehouse: Path, kind: str) -> list[str]:
    """'view': the view models' snapshots; 'table': the snapshots that store rows (table or file)."""
    return snapshot_relations(warehouse, ("view",) if kind == "view" else ("table", "file"))


def paths(result) -> dict[str, str]:
    return {outcome.model: outcome.path for outcome in result.outcomes}


def test_view_model_stores_no_rows_and_reads_like_a_table(tmp_path):
    project, warehouse = make_views(tmp_path / "view")
    result = run_project(project, warehouse)
    assert paths(result) == {"stg_orders": VIEW, "totals": FULL}
    stg = result.outcome("stg_orders")
    assert snapshot_objects(warehouse, "view") == [stg.table_name]
    assert not any(name.endswith("_stg_orders") for name in snapshot_objects(warehouse, "table"))
    assert (
        f"strata_snapshots.{stg.table_name}"
        in execute(warehouse, "SELECT sql FROM duckdb_views() WHERE view_name = 'v_stg_orders'")[0][0]
    )
    # The same models built as tables give the same rows.
    table_project, table_warehouse = make_views(
        tmp_path / "table", MODULE.replace("  materialize: view\n", "")
    )
    run_project(table_project, table_warehouse)
    for model in ("stg_orders", "totals"):
        view_rows = row_multiset(warehouse, f"main.v_{model}")
        assert view_rows and view_rows == row_multiset(table_warehouse, f"main.v_{model}")


def test_source_change_rebuilds_downstream_and_no_change_reuses_everything(tmp_path):
    project, warehouse = make_views(tmp_path)
    first = run_project(project, warehouse)
    again = run_project(project, warehouse, only_stale=True)
    assert again.is_noop and paths(again) == {"stg_orders": REUSED, "totals": REUSED}
    forced = run_project(project, warehouse)
    assert paths(forced) == {"stg_orders": CUTOFF, "totals": CUTOFF}
    assert len(snapshot_objects(warehouse, "view")) == 1
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 1 WHERE order_id = 3")
    changed = run_project(project, warehouse, only_stale=True)
    assert paths(changed) == {"stg_orders": VIEW, "totals": FULL}
    assert changed.outcome("stg_orders").snapshot_id != first.outcome("stg_orders").snapshot_id
    assert execute(warehouse, "SELECT revenue FROM main.v_totals WHERE status = 'open'") != execute(
        warehouse,
        "SELECT sum(amount) * 0.9 - 0.9 FROM raw.orders WHERE status = 'open'",
    )
    assert execute(warehouse, "SELECT sum(revenue) FROM main.v_totals") == execute(
        warehouse, "SELECT sum(amount * 0.9) FROM raw.orders WHERE status <> 'cancelled'"
    )


def test_a_change_filtered_out_of_the_view_stops_at_the_downstream_rows(tmp_path):
    """A source change gives the view a new identity (its rows are never hashed), so downstream
    rebuilds; equal rows then cut off there."""
    project, warehouse = make_views(tmp_path)
    run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 1 WHERE order_id = 5")  # cancelled
    result = run_project(project, warehouse, only_stale=True)
    assert paths(result) == {"stg_orders": VIEW, "totals": CUTOFF}


def test_rollback_branch_promote_and_gc_treat_the_view_as_a_snapshot(tmp_path):
    project, warehouse = make_views(tmp_path)
    first = run_project(project, warehouse)
    operations.create_branch(warehouse, "dev")
    module = project / "m.strata"
    edit_module(module, "amount * 0.9", "amount * 0.8")
    run_project(project, warehouse, branch="dev")
    dev_total = execute(warehouse, "SELECT sum(amount_eur) FROM dev.v_stg_orders")
    assert dev_total != execute(warehouse, "SELECT sum(amount_eur) FROM main.v_stg_orders")
    second = run_project(project, warehouse)
    assert second.outcome("stg_orders").snapshot_id != first.outcome("stg_orders").snapshot_id
    operations.rollback(warehouse, first.run_id)
    assert execute(warehouse, "SELECT sum(amount_eur) FROM main.v_stg_orders") == execute(
        warehouse, "SELECT sum(amount * 0.9) FROM raw.orders WHERE status <> 'cancelled'"
    )
    operations.promote(warehouse, "dev")
    assert execute(warehouse, "SELECT sum(amount_eur) FROM main.v_stg_orders") == dev_total
    # Nothing but main and dev need the views they expose; gc drops the view of the first run.
    operations.rollback(warehouse, second.run_id)
    operations.create_branch(warehouse, "other")
    result = gc(warehouse, keep=0, compact_file=True)  # the file is rewritten: views copied too
    dropped = {record.snapshot_id for record in result.dropped_snapshots}
    assert first.outcome("stg_orders").snapshot_id in dropped
    assert snapshot_objects(warehouse, "view") == [second.outcome("stg_orders").table_name]
    assert execute(warehouse, "SELECT sum(amount_eur) FROM main.v_stg_orders") == dev_total
    assert execute(warehouse, "SELECT sum(revenue) FROM dev.v_totals") == execute(
        warehouse, "SELECT sum(revenue) FROM main.v_totals"
    )


def test_verify_passes_on_a_view_model_and_its_readers(tmp_path):
    project, warehouse = make_views(tmp_path)
    run_project(project, warehouse)
    execute(warehouse, "DELETE FROM raw.orders WHERE order_id < 10")
    run_project(project, warehouse, only_stale=True)
    report = verify(project, warehouse)
    assert {model.model for model in report.models} == {"stg_orders", "totals"}
    assert report.is_equal


def test_view_contract_is_checked_at_build_and_nothing_is_published(tmp_path):
    project, warehouse = make_views(tmp_path)
    first = run_project(project, warehouse)
    edit_module(project / "m.strata", "order_id: BIGINT,", "order_id: VARCHAR,")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E031"
    assert (
        f"strata_snapshots.{first.outcome('stg_orders').table_name}"
        in execute(warehouse, "SELECT sql FROM duckdb_views() WHERE view_name = 'v_stg_orders'")[0][0]
    )
    assert snapshot_objects(warehouse, "view") == [first.outcome("stg_orders").table_name]


def test_switching_materialize_rebuilds_once_with_equal_rows(tmp_path):
    project, warehouse = make_views(tmp_path)
    run_project(project, warehouse)
    rows = row_multiset(warehouse, "main.v_stg_orders")
    edit_module(project / "m.strata", "  materialize: view\n", "  materialize: table\n")
    result = run_project(project, warehouse, only_stale=True)
    assert paths(result) == {"stg_orders": FULL, "totals": CUTOFF}
    assert row_multiset(warehouse, "main.v_stg_orders") == rows
    edit_module(project / "m.strata", "  materialize: table\n", "  materialize: view\n")
    back = run_project(project, warehouse, only_stale=True)
    assert paths(back) == {"stg_orders": REUSED, "totals": REUSED}
    assert row_multiset(warehouse, "main.v_stg_orders") == rows


def test_a_volatile_view_gives_its_readers_a_new_identity_every_run(tmp_path):
    """A view calling now() shows other rows as time passes while its inputs stay the same: its
    readers must be rebuilt by every run, as they are over a volatile table model."""
    module = MODULE.replace(
        "filter status <> 'cancelled'", "filter status <> 'cancelled' and now() > DATE '2000-01-01'"
    )
    project, warehouse = make_views(tmp_path, module)
    first = run_project(project, warehouse)
    again = run_project(project, warehouse, only_stale=True)
    assert paths(again) == {"stg_orders": VIEW, "totals": CUTOFF}
    assert again.outcome("stg_orders").snapshot_id != first.outcome("stg_orders").snapshot_id


PARTITIONED = """
source orders {
  table: raw.orders
  partitioned_by: day(order_ts)
  start: 2026-01-01
}

model stg_orders {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  derive amount_eur = amount * 0.9
  materialize: view
}

model daily {
  from stg_orders
  group order_day
  aggregate revenue = sum(amount_eur), n = count(*)
  partitioned_by: day(order_day)
}
"""
DAILY_ORDERS = (
    "CREATE OR REPLACE TABLE raw.orders AS SELECT range AS order_id, "
    "TIMESTAMP '2026-01-01' + to_hours(range * 5) AS order_ts, "
    "CASE WHEN range % 6 = 0 THEN 'cancelled' ELSE 'paid' END AS status, "
    "CAST(range % 30 + 1 AS DECIMAL(12, 2)) AS amount FROM range(300)"
)
DAILY_FULL = (
    "SELECT CAST(order_ts AS DATE) AS order_day, sum(amount * 0.9) AS revenue, count(*) AS n "
    "FROM raw.orders WHERE status <> 'cancelled' GROUP BY 1"
)


def test_partitioned_model_over_a_view_rebuilds_only_the_changed_partitions(tmp_path):
    project, warehouse = make_module_project(tmp_path, "m.strata", PARTITIONED, DAILY_ORDERS)
    first = run_project(project, warehouse)
    assert paths(first) == {"stg_orders": VIEW, "daily": FULL}
    # The partitions were found from the raw source's rows, in the scan that fingerprints it.
    with open_session(warehouse) as session:
        record = session.history.snapshot(first.outcome("daily").snapshot_id)
    assert record is not None
    recorded = record.detail["partition_fingerprints"]
    assert sum(count for count, _ in recorded.values()) == 300  # cancelled rows too: before the filter
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 7 WHERE order_id IN (13, 14)")
    changed = run_project(project, warehouse, only_stale=True)
    assert paths(changed) == {"stg_orders": VIEW, "daily": "partitions"}
    assert changed.outcome("daily").detail["partitions"] == ["2026-01-03"]
    assert row_multiset(warehouse, "main.v_daily") == row_multiset(warehouse, f"({DAILY_FULL})")


def test_a_view_over_a_source_in_another_database_reads_through_strata(tmp_path):
    """The view names the catalog strata attaches the source's database under; strata's own readers
    (a Python consumer's load, verify) attach it before reading."""
    (tmp_path / "project").mkdir()
    execute(tmp_path / "project" / "ingest.duckdb", "CREATE SCHEMA raw", ORDERS)
    module = MODULE.replace(
        "source orders { table: raw.orders }",
        "source orders {\n  database: 'ingest.duckdb'\n  table: raw.orders\n}",
    )
    project, warehouse = make_module_project(tmp_path, "m.strata", module)
    run_project(project, warehouse)
    rows = read_model(load_project(project), warehouse, "stg_orders")
    assert rows.num_rows == 160
    assert verify(project, warehouse).is_equal


def test_strata_run_shows_a_view_instead_of_a_row_count(tmp_path):
    project, warehouse = make_views(tmp_path)
    result = CliRunner().invoke(main, ["run", str(project), "--warehouse", str(warehouse)])
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.strip().startswith("stg_orders")]
    assert line.split()[1:3] == ["view", "a"] and "rows" not in line


CHAINED = """
source orders { table: raw.orders }

model paid {
  from orders
  filter status = 'paid'
}

model paid_eur {
  from paid
  derive amount_eur = amount * 0.9
  materialize: view
}
"""


def test_gc_keeps_the_snapshot_a_live_view_reads(tmp_path):
    """After a run of the upstream model alone, the live view still reads the upstream's previous
    snapshot, which no pointer names: gc must keep it, or the view could not be read."""
    project, warehouse = make_views(tmp_path, CHAINED)
    first = run_project(project, warehouse)
    before = row_multiset(warehouse, "main.v_paid_eur")
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 1 WHERE status = 'paid'")
    second = run_project(project, warehouse, models=["paid"])
    assert second.outcome("paid").snapshot_id != first.outcome("paid").snapshot_id
    gc(warehouse, keep=0)
    assert first.outcome("paid").table_name in snapshot_objects(warehouse, "table")
    assert row_multiset(warehouse, "main.v_paid_eur") == before


def test_a_view_built_over_an_identical_override_is_rebuilt_over_the_source_later(tmp_path):
    """An override with the source's own rows has the source's fingerprint, but the view built under
    it reads the override's table: a later run without the override must not reuse (or cut off to)
    that view, and `--full-refresh` always rebuilds a view (found by review: the view kept serving
    the scratch table's rows, and broke when it was dropped)."""
    project, warehouse = make_views(tmp_path)
    run_project(project, warehouse)
    # A new order, in the source and in a "corrected" extract that holds the same rows.
    execute(warehouse, "INSERT INTO raw.orders VALUES (500, 'open', 3)")
    execute(warehouse, "CREATE SCHEMA fixes; CREATE TABLE fixes.orders AS SELECT * FROM raw.orders")
    assert paths(run_project(project, warehouse, overrides={"orders": "fixes.orders"}))["stg_orders"] == VIEW

    after = run_project(project, warehouse, only_stale=True)

    # The view built before the override (over raw.orders) is reused, or a new one built.
    assert paths(after)["stg_orders"] in (REUSED, VIEW)
    views = execute(warehouse, "SELECT sql FROM duckdb_views() WHERE schema_name = 'strata_snapshots'")
    live = after.outcome("stg_orders").table_name
    assert not any("fixes" in sql for (sql,) in views if live in sql)
    execute(warehouse, "INSERT INTO fixes.orders VALUES (999, 'open', 1)")
    assert row_multiset(warehouse, "main.v_stg_orders") == row_multiset(
        warehouse, "(SELECT *, amount * 0.9 AS amount_eur FROM raw.orders WHERE status <> 'cancelled')"
    )
    refreshed = run_project(project, warehouse, models=["stg_orders"], full_refresh=True)
    assert paths(refreshed)["stg_orders"] == VIEW


def test_history_says_what_a_view_build_is(tmp_path):
    project, warehouse = make_views(tmp_path)
    run_project(project, warehouse)
    result = CliRunner().invoke(main, ["history", str(project), "--warehouse", str(warehouse), "--json"])
    assert result.exit_code == 0, result.output
    builds = {build["model"]: build for build in json.loads(result.output)[-1]["builds"]}
    assert builds["stg_orders"]["path"] == VIEW
    assert "no rows stored" in builds["stg_orders"]["reason"]


def test_replay_of_a_run_with_a_view_model_is_reproduced(tmp_path):
    """A view's identity is not a hash of its rows, so replay does not compare rows with it (it
    reported every view model as differing, exit 1); it says the view reads live."""
    project, warehouse = make_views(tmp_path)
    result = run_project(project, warehouse)
    report = replay(warehouse, result.run_id, execute=True)
    statuses = {check.model: check.status for check in report.checks}
    assert statuses["stg_orders"] == "view" and statuses["totals"] == "reproduced"
    assert report.is_reproduced
