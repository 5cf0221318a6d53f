"""The engine on the shop example: only-stale runs, early cutoff, rollback, history, pins."""

import pytest

from strata_dagster.compile.relations import attached_catalog
from strata_dagster.engine.commands import operations
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.commands.replay import replay
from strata_dagster.engine.reads.partition_staleness import stale_partitions
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project
from strata_dagster_tests.support.engine_support import (
    ADVANCE_UPDATED_AT,
    SHOP_MODELS,
    SNAPSHOT_RELATIONS,
    edit_module,
    execute,
    history_count,
    make_module_project,
    make_shop,
    row_multiset,
    snapshot_relations,
    view_tables,
)

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)

ALL_MODELS = SHOP_MODELS
DOWNSTREAM_OF_CUSTOMERS = {"stg_customers", "orders_enriched", "daily_revenue", "monthly_revenue"}


@pytest.fixture
def shop(tmp_path):
    return make_shop(tmp_path)


def paths(result):
    return {outcome.model: outcome.path for outcome in result.outcomes}


def test_first_run_builds_everything_and_views_expose_it(shop):
    project, warehouse = shop
    result = run_project(project, warehouse)
    assert set(paths(result)) == ALL_MODELS
    assert set(paths(result).values()) == {"full"}
    assert set(view_tables(warehouse)) == {f"v_{name}" for name in ALL_MODELS}
    assert row_multiset(warehouse, "main.v_order_status_log") == row_multiset(
        warehouse, "(SELECT order_id, status, updated_at FROM raw.orders)"
    )
    count = execute(warehouse, "SELECT count(*) FROM main.v_stg_orders")[0][0]
    expected = execute(warehouse, "SELECT count(*) FROM raw.orders WHERE status <> 'cancelled'")[0][0]
    assert count == expected > 0


def test_nothing_changed_writes_nothing(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    before = (history_count(warehouse), view_tables(warehouse))
    result = run_project(project, warehouse, only_stale=True)
    assert result.is_noop and result.run_id is None
    assert set(paths(result).values()) == {"reused"}
    assert (history_count(warehouse), view_tables(warehouse)) == before


def test_changed_source_row_rebuilds_exactly_its_downstream(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.customers SET region = 'atlantis' WHERE customer_id = 1")
    second = run_project(project, warehouse, only_stale=True)
    rebuilt = {name for name, path in paths(second).items() if path != "reused"}
    assert rebuilt == DOWNSTREAM_OF_CUSTOMERS
    assert all(paths(second)[name] == "reused" for name in ALL_MODELS - DOWNSTREAM_OF_CUSTOMERS)
    published = {outcome.model for outcome in second.outcomes if outcome.is_published}
    assert published <= DOWNSTREAM_OF_CUSTOMERS and "stg_customers" in published
    assert execute(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1") == [
        ("atlantis",)
    ]
    assert first.run_id != second.run_id


def test_early_cutoff_keeps_snapshots_when_rows_do_not_change(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    views = view_tables(warehouse)
    # `name` reaches stg_customers but no model downstream of it selects it.
    execute(warehouse, "UPDATE raw.customers SET name = 'someone else' WHERE customer_id = 2")
    result = run_project(project, warehouse, only_stale=True)
    assert paths(result)["stg_customers"] == "full"
    assert paths(result)["orders_enriched"] == "cutoff"
    # A partitioned model whose joined input changed recomputes the days holding customer 2's
    # orders, to the same rows: its live state stays, so the month model over it is reused.
    daily = result.outcome("daily_revenue")
    assert daily.path == "cutoff"
    assert 0 < len(daily.detail["partitions"]) < daily.detail["partitions_total"]
    assert paths(result)["monthly_revenue"] == "reused"
    after = view_tables(warehouse)
    assert after["v_daily_revenue"] == views["v_daily_revenue"]
    assert after["v_orders_enriched"] == views["v_orders_enriched"]
    assert after["v_monthly_revenue"] == views["v_monthly_revenue"]
    assert after["v_stg_customers"] != views["v_stg_customers"]
    # The state stayed but its input figures moved, and the entry kept them: nothing is stale
    # now, and the next run does not recompute those days again.
    assert stale_partitions(project, warehouse)["daily_revenue"].keys == ()
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_run_id_is_a_content_id(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.customers SET region = 'atlantis' WHERE customer_id = 1")
    second = run_project(project, warehouse, only_stale=True)
    operations.rollback(warehouse, first.run_id)
    # Same data and selection as the second run: the same id, and its snapshots are reused.
    third = run_project(project, warehouse, only_stale=True)
    assert third.run_id == second.run_id
    assert {outcome.path for outcome in third.outcomes} == {"reused"}
    assert {outcome.model for outcome in third.outcomes if outcome.is_published} == DOWNSTREAM_OF_CUSTOMERS


def test_rollback_restores_every_view_and_history_shows_all(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    views_after_first = view_tables(warehouse)
    execute(warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id = 5")
    second = run_project(project, warehouse, only_stale=True)
    assert view_tables(warehouse) != views_after_first
    result = operations.rollback(warehouse, first.run_id)
    assert result.changes
    assert view_tables(warehouse) == views_after_first
    entries = operations_entries(warehouse)
    assert [entry[1] for entry in entries] == ["run", "run", "rollback"]
    assert [entry[0] for entry in entries][:2] == [first.run_id, second.run_id]
    # The live view no longer exposes what the history of runs built last: the next run repoints.
    third = run_project(project, warehouse, only_stale=True)
    assert {outcome.model for outcome in third.outcomes if outcome.is_published}
    assert execute(warehouse, "SELECT count(*) FROM main.v_stg_orders") == execute(
        warehouse, "SELECT count(*) FROM raw.orders WHERE status <> 'cancelled'"
    )


def operations_entries(warehouse):
    return execute(warehouse, "SELECT run_id, kind FROM strata.entries ORDER BY entry")


def test_edited_view_is_repaired_by_the_next_run(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    execute(
        warehouse, "CREATE OR REPLACE VIEW main.v_stg_customers AS SELECT * FROM raw.customers WHERE false"
    )
    result = run_project(project, warehouse, only_stale=True)
    assert [outcome.model for outcome in result.outcomes if outcome.is_published] == ["stg_customers"]
    assert execute(warehouse, "SELECT count(*) FROM main.v_stg_customers")[0][0] > 0


def test_dropped_snapshot_table_is_rebuilt(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    table = first.outcome("order_tags").table_name
    kind = "TABLE" if table in snapshot_relations(warehouse, ("table",)) else "VIEW"
    execute(warehouse, f"DROP VIEW main.v_order_tags; DROP {kind} strata_snapshots.{table}")
    result = run_project(project, warehouse, only_stale=True)
    assert paths(result)["order_tags"] == "full"
    assert execute(warehouse, "SELECT count(*) FROM main.v_order_tags")[0][0] > 0


def test_override_with_identical_content_changes_nothing(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    execute(warehouse, "CREATE SCHEMA fixes; CREATE TABLE fixes.customers AS SELECT * FROM raw.customers")
    result = run_project(project, warehouse, only_stale=True, overrides={"customers": "fixes.customers"})
    assert result.is_noop


def test_override_with_corrected_table_rebuilds_its_downstream(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    execute(
        warehouse,
        "CREATE SCHEMA fixes; CREATE TABLE fixes.customers AS SELECT * REPLACE ('fixed' AS region) FROM raw.customers",
    )
    result = run_project(project, warehouse, only_stale=True, overrides={"customers": "fixes.customers"})
    assert {name for name, path in paths(result).items() if path != "reused"} == DOWNSTREAM_OF_CUSTOMERS
    assert execute(warehouse, "SELECT DISTINCT region FROM main.v_stg_customers") == [("fixed",)]
    assert execute(warehouse, "SELECT overrides FROM strata.entries ORDER BY entry DESC LIMIT 1") == [
        ('{"customers": "fixes.customers"}',)
    ]


def test_unique_pin_failure_publishes_nothing(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    count_tables = f"SELECT count(*) FROM {SNAPSHOT_RELATIONS}"
    # One snapshot per view, and the figures per key of their joined stg_customers that
    # daily_revenue (by partitions) and orders_enriched (by its window key) record.
    tables = execute(warehouse, count_tables)[0][0]
    views, entries = view_tables(warehouse), history_count(warehouse)
    assert tables == len(views) + 2
    execute(warehouse, "INSERT INTO raw.customers SELECT * FROM raw.customers WHERE customer_id = 3")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert caught.value.code == "E030"
    assert "customer_id=3" in caught.value.message
    assert (view_tables(warehouse), history_count(warehouse)) == (views, entries)
    assert execute(warehouse, count_tables)[0][0] == tables


def test_contract_failure_publishes_nothing(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    views = view_tables(warehouse)
    edit_module(project / "staging.strata", "customer_id: BIGINT not null", "customer_id: VARCHAR not null")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E031"
    assert "customer_id" in caught.value.message
    assert view_tables(warehouse) == views


def test_a_contract_failure_names_every_column_it_breaks_in_the_contracts_order(tmp_path):
    module = (
        "source t { table: raw.t }\n"
        "model m {\n  from t\n"
        "  contract: { a: BIGINT not null, b: INTEGER not null, d: INT not null, e: VARCHAR not null }\n}\n"
    )
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        module,
        "CREATE TABLE raw.t AS SELECT * FROM (VALUES (1::BIGINT, 'x', 1::INTEGER, 'y'), "
        "(NULL, 'z', NULL, NULL)) AS v(a, b, d, e)",
    )
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E031"
    assert caught.value.message == (
        "model `m` breaks its `contract`: `a` has 1 NULL value(s) but is `not null`; "
        "`b` is VARCHAR, the contract says INTEGER; `d` has 1 NULL value(s) but is `not null`; "
        "`e` has 1 NULL value(s) but is `not null`"
    )
    assert not view_tables(warehouse)


def test_code_change_rebuilds_the_model_and_its_downstream(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    marts = project / "marts.strata"
    edit_module(marts, "active_days = count(*)", "active_days = count(*) + 0")
    result = run_project(project, warehouse, only_stale=True)
    assert {name for name, path in paths(result).items() if path != "reused"} == {"monthly_revenue"}
    # Comments and descriptions are not code.
    edit_module(marts, "-- A join with `on`", "-- A join, with `on`")
    edit_module(marts, "Orders with their customer region", "Orders and customer region")
    assert run_project(project, warehouse, only_stale=True).is_noop


def test_order_by_tie_breakers_of_a_join_build(shop):
    """`orders_enriched` without its unique pin: its `order_by` columns become the window's
    tie-breakers, and `customer_id` is a column of both sides of its join."""
    project, warehouse = shop
    marts = project / "marts.strata"
    edit_module(marts, "  unique: [order_id]\n  -- Deterministic", "  -- Deterministic")
    edit_module(
        marts,
        "order_by: [customer_id, order_ts, order_id]",
        "order_by: [customer_id, order_ts, order_id, region]",
    )
    assert run_project(project, warehouse).outcome("orders_enriched").is_published
    assert execute(warehouse, "SELECT count(*) FROM main.v_orders_enriched")[0][0] > 0


def test_unknown_model_selection(shop):
    project, warehouse = shop
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, models=["nope"])
    assert caught.value.code == "E025"


def test_selection_builds_upstream_it_needs(shop):
    project, warehouse = shop
    result = run_project(project, warehouse, models=["monthly_revenue"])
    assert set(paths(result)) == {"monthly_revenue", "daily_revenue", "stg_orders", "stg_customers"}


def test_branches_are_zero_copy_and_promote(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    snapshots_before = execute(warehouse, "SELECT count(*) FROM strata.snapshots")
    operations.create_branch(warehouse, "dev")
    main_views = view_tables(warehouse, "main")
    dev_views = view_tables(warehouse, "dev")
    # The same snapshot tables behind both branches' views.
    assert {name: sql.split(" AS ", 1)[1] for name, sql in dev_views.items()} == {
        name: sql.split(" AS ", 1)[1] for name, sql in main_views.items()
    }
    assert len(dev_views) == len(ALL_MODELS)
    assert execute(warehouse, "SELECT count(*) FROM strata.snapshots") == snapshots_before
    execute(warehouse, "UPDATE raw.customers SET region = 'dev-only' WHERE customer_id = 1")
    run_project(project, warehouse, only_stale=True, branch="dev")
    assert execute(warehouse, "SELECT count(*) FROM main.v_stg_customers WHERE region = 'dev-only'") == [(0,)]
    assert execute(warehouse, "SELECT count(*) FROM dev.v_stg_customers WHERE region = 'dev-only'") == [(1,)]
    operations.promote(warehouse, "dev", "main")
    assert execute(warehouse, "SELECT count(*) FROM main.v_stg_customers WHERE region = 'dev-only'") == [(1,)]
    kinds = [row[1] for row in operations_entries(warehouse)]
    assert kinds == ["run", "branch", "run", "promote"]


def test_invalid_branch_names(shop):
    project, warehouse = shop
    for name in ("strata", "1abc", "a-b", "x; drop table raw.orders"):
        with pytest.raises(StrataError) as caught:
            run_project(project, warehouse, branch=name)
        assert caught.value.code == "E026"
    assert execute(warehouse, "SELECT count(*) FROM raw.orders")[0][0] == 3_000


def test_a_source_in_schema_main_of_another_database_leaves_branch_main_usable(tmp_path):
    """Its schema is that database's `main`, not the warehouse's: only the name it is attached
    under clashes."""
    ingest = tmp_path / "ingest.duckdb"
    execute(ingest, "CREATE TABLE main.orders AS SELECT range AS id FROM range(3)")
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.strata").write_text(
        f"source orders {{\n  database: '{ingest}'\n  table: main.orders\n}}\nmodel copy {{\n  from orders\n}}\n"
    )
    warehouse = tmp_path / "warehouse.duckdb"
    assert paths(run_project(project, warehouse)) == {"copy": "full"}
    assert execute(warehouse, "SELECT count(*) FROM main.v_copy") == [(3,)]
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, branch=attached_catalog(load_project(project).sources["orders"]))
    assert caught.value.code == "E026"


def test_gc_drops_only_unreferenced_snapshots(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.customers SET region = 'r2' WHERE customer_id = 1")
    second = run_project(project, warehouse, only_stale=True)
    execute(warehouse, "UPDATE raw.customers SET region = 'r3' WHERE customer_id = 1")
    run_project(project, warehouse, only_stale=True)
    first_only = {o.snapshot_id for o in first.outcomes} - {o.snapshot_id for o in second.outcomes}
    result = gc(warehouse, keep=2)
    # Only snapshots of the first run that no kept state still uses as a segment go.
    kept_segments = {
        snapshot_id
        for (ids,) in execute(warehouse, "SELECT snapshot_ids FROM strata.publications WHERE entry >= 2")
        for snapshot_id in ids
    }
    assert set(result.dropped) == first_only - kept_segments
    assert set(result.dropped)
    # Every view still reads, and the second run can still be rolled back to.
    operations.rollback(warehouse, second.run_id)
    for view in view_tables(warehouse):
        execute(warehouse, f"SELECT count(*) FROM main.{view}")
    with pytest.raises(StrataError) as caught:
        operations.rollback(warehouse, first.run_id)
    assert caught.value.code == "E024"


def test_replay_shows_and_reproduces_a_run(shop):
    project, warehouse = shop
    first = run_project(project, warehouse)
    report = replay(warehouse, first.run_id, execute=True)
    assert {model.model for model in report.models} == ALL_MODELS
    assert {source.source for source in report.sources} == {"orders", "customers"}
    assert report.is_reproduced, report.checks
    execute(warehouse, "UPDATE raw.customers SET region = 'later' WHERE customer_id = 1")
    report = replay(warehouse, first.run_id[:12], execute=True)
    status = {check.model: check.status for check in report.checks}
    assert status["stg_customers"] == "inputs changed"
    assert status["stg_orders"] == "reproduced"
    assert status["daily_revenue"] == "reproduced"  # reads immutable upstream snapshots
    tables = execute(warehouse, "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'scratch_%'")
    assert tables == [(0,)]


def test_unknown_run_id(shop):
    project, warehouse = shop
    first = run_project(project, warehouse).run_id
    execute(warehouse, f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id = 5")
    second = run_project(project, warehouse).run_id
    # A pin is no part of a snapshot: a run after removing one publishes the same state, under the
    # same run id, as a history entry of its own.
    edit_module(
        project / "staging.strata",
        "  cdc_column: updated_at\n  unique: [order_id]\n",
        "  cdc_column: updated_at\n",
    )
    assert run_project(project, warehouse).run_id == second
    with pytest.raises(StrataError) as caught:
        operations.rollback(warehouse, "deadbeef")
    assert caught.value.code == "E023"
    assert caught.value.hint.endswith(f"recent: {second[:12]}, {first[:12]}")  # newest first, once each


def test_sql_duckdb_rejects_is_e032_and_publishes_nothing(shop):
    project, warehouse = shop
    run_project(project, warehouse)
    views = view_tables(warehouse)
    edit_module(
        project / "marts.strata", "active_days = count(*)", "active_days = no_such_function(order_count)"
    )
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, only_stale=True)
    assert caught.value.code == "E032"
    assert "monthly_revenue" in caught.value.message
    assert view_tables(warehouse) == views
