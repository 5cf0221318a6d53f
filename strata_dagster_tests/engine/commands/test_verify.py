"""`strata verify` on the shop example: incremental (live) results against full rebuilds in scratch."""

import datetime as dt
import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest
from click.testing import CliRunner

from strata_dagster.backends.duckdb.compare import ColumnTotal, Figures
from strata_dagster.cli.main import main
from strata_dagster.engine.commands import operations
from strata_dagster.engine.commands import verify as verify_module
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.faults import KILL_AT_ENV
from strata_dagster_tests.support.engine_support import (
    SHOP_MODELS,
    VERIFY_COUNTS,
    execute,
    history_count,
    make_shop,
    view_tables,
)

ALL_MODELS = SHOP_MODELS
# Models whose rows carry an order's amount (or a sum of it).
CARRY_AMOUNT = {"stg_orders", "first_seen_orders", "orders_enriched", "daily_revenue", "monthly_revenue"}


@pytest.fixture
def built(tmp_path):
    project, warehouse = make_shop(tmp_path)
    run_project(project, warehouse)
    return project, warehouse


def counts(figures):
    return tuple(getattr(figures, name) for name in VERIFY_COUNTS)


def live_state(warehouse):
    """Everything verify must leave alone: tables of every schema, views, history."""
    tables = execute(
        warehouse,
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT internal ORDER BY ALL",
    )
    return tables, view_tables(warehouse), history_count(warehouse)


def scratch_tables(warehouse):
    return execute(warehouse, "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'scratch_%'")


def replace_live(warehouse, model, *edits):
    """Drift a model behind the engine's back: its view now reads an edited copy of its rows."""
    execute(
        warehouse,
        "CREATE SCHEMA IF NOT EXISTS drift",
        f"CREATE TABLE drift.{model} AS SELECT * FROM main.v_{model}",
        *edits,
        f"CREATE OR REPLACE VIEW main.v_{model} AS SELECT * FROM drift.{model}",
    )


def paid_order(warehouse):
    """(order_id, customer_id, amount, order day) of the first paid or shipped order."""
    return execute(
        warehouse,
        "SELECT order_id, customer_id, amount, order_day FROM main.v_stg_orders "
        "WHERE status IN ('paid', 'shipped') ORDER BY order_id LIMIT 1",
    )[0]


def paths(result):
    return {outcome.model: outcome.path for outcome in result.outcomes}


def test_incremental_builds_verify_with_all_zeros(built):
    project, warehouse = built
    # Orders move on (cdc advances past the watermark) and new orders arrive: delta builds.
    execute(
        warehouse,
        "UPDATE raw.orders SET status = 'shipped', "
        "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 HOUR WHERE order_id < 20",
        "INSERT INTO raw.orders SELECT * REPLACE (order_id + 100000 AS order_id, "
        "updated_at + INTERVAL 2 HOUR AS updated_at) FROM raw.orders WHERE order_id < 20",
    )
    result = run_project(project, warehouse, only_stale=True)
    assert paths(result)["stg_orders"] == "delta" and paths(result)["order_status_log"] == "delta"
    before = live_state(warehouse)
    report = verify(project, warehouse)
    assert report.is_equal and not report.mismatched
    assert {model.model for model in report.models} == ALL_MODELS
    for model in report.models:
        assert counts(model.figures) == (0, 0, 0, 0, 0), model.model
        assert all(total.is_equal for total in model.figures.totals), model.model
        if not model.is_history:
            live_rows = execute(warehouse, f"SELECT count(*) FROM main.v_{model.model}")[0][0]
            assert model.figures.full_rows == model.figures.incremental_rows == live_rows
    # An append model keeps every earlier version of a row: history a full rebuild cannot give.
    log = report.model("order_status_log")
    assert (log.merge_strategy, log.figures.history_rows) == ("append", 19)
    first_seen = report.model("first_seen_orders")
    assert first_seen.compared_columns == ("order_id",) and first_seen.figures.history_rows == 0
    daily = report.model("daily_revenue")
    assert daily.partitioned_by == "day(order_day)"
    days = execute(warehouse, "SELECT count(DISTINCT order_day) FROM main.v_daily_revenue")[0][0]
    assert len(daily.partitions) == days and daily.mismatched_partitions == ()
    revenue = execute(warehouse, "SELECT sum(revenue) FROM main.v_daily_revenue")[0][0]
    assert {total.column: total.full for total in daily.figures.totals}["revenue"] == revenue
    assert live_state(warehouse) == before


def test_silent_source_edit_is_caught_with_exact_counts(built):
    """A source row changed without advancing `updated_at`: the source is versioned by that column,
    so by the cdc contract the run does not see the change. Verify does."""
    project, warehouse = built
    order_id, _, _, day = paid_order(warehouse)
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 10 WHERE order_id = ?", params=[order_id])
    assert run_project(project, warehouse, only_stale=True).is_noop
    report = verify(project, warehouse)
    assert not report.is_equal
    # first_seen_orders keeps the first version of each order on purpose (compared on keys).
    assert {model.model for model in report.mismatched} == CARRY_AMOUNT - {"first_seen_orders"}
    for name in CARRY_AMOUNT - {"first_seen_orders"}:
        model = report.model(name)
        # The changed row: its old version only live, its new version only in full.
        assert counts(model.figures) == (0, 1, 1, 0, 2), name
        (total,) = model.figures.mismatched_totals
        assert total.column in {"amount", "revenue"}
        assert total.full - total.incremental == Decimal("10.00"), name
    assert report.model("daily_revenue").mismatched_partitions == (day.isoformat(),)
    assert report.model("monthly_revenue").mismatched_partitions == (day.replace(day=1).isoformat(),)
    (partition,) = [part for part in report.model("daily_revenue").partitions if not part.is_equal]
    assert counts(partition.figures) == (0, 1, 1, 0, 2)


def test_lost_and_duplicated_rows(built):
    """What a broken upsert (a row lost), append (a row twice) or append_new (a key lost) would publish."""
    project, warehouse = built
    order_id, customer_id, amount, _ = paid_order(warehouse)
    replace_live(warehouse, "stg_orders", f"DELETE FROM drift.stg_orders WHERE order_id = {order_id}")
    replace_live(
        warehouse,
        "order_status_log",
        f"INSERT INTO drift.order_status_log SELECT * FROM drift.order_status_log WHERE order_id = {order_id}",
    )
    replace_live(
        warehouse, "first_seen_orders", f"DELETE FROM drift.first_seen_orders WHERE order_id = {order_id}"
    )
    selection = ["stg_orders", "order_status_log", "first_seen_orders", "stg_customers"]
    report = verify(project, warehouse, models=selection)
    lost = report.model("stg_orders").figures
    assert counts(lost) == (-1, 1, 0, 0, 1)
    assert lost.incremental_rows == lost.full_rows - 1
    assert {total.column: total.full - total.incremental for total in lost.mismatched_totals} == {
        "order_id": order_id,
        "customer_id": customer_id,
        "amount": amount,
    }
    twice = report.model("order_status_log").figures
    assert counts(twice) == (1, 0, 0, 1, 3) and twice.history_rows == 0
    (total,) = twice.mismatched_totals  # the only numeric column is the key
    assert (total.column, total.incremental - total.full) == ("order_id", order_id)
    lost_key = report.model("first_seen_orders").figures
    assert counts(lost_key) == (-1, 1, 0, 0, 1)
    assert report.model("stg_customers").is_equal
    assert [model.model for model in report.mismatched] == [
        "first_seen_orders",
        "order_status_log",
        "stg_orders",
    ]


def test_partitioned_model_reports_the_partition(built):
    project, warehouse = built
    day, region = execute(
        warehouse,
        "SELECT order_day, min(region) FROM main.v_daily_revenue WHERE order_day < '2025-03-01' "
        "GROUP BY 1 ORDER BY 1 DESC LIMIT 1",
    )[0]
    replace_live(
        warehouse,
        "daily_revenue",
        f"UPDATE drift.daily_revenue SET revenue = revenue + 1 WHERE order_day = '{day}' AND region = '{region}'",
    )
    report = verify(project, warehouse)
    daily = report.model("daily_revenue")
    assert daily.mismatched_partitions == (day.isoformat(),)
    assert counts(daily.figures) == (0, 1, 1, 0, 2)
    assert report.model("monthly_revenue").is_equal  # its live rows were built from the true ones
    metadata = daily.as_metadata()
    assert metadata["mismatched_partitions"] == [day.isoformat()]
    assert metadata["hash_groups_only_in_full"] == 1 and metadata["is_equal"] is False
    assert metadata["numeric_totals"]["revenue"]["is_equal"] is False
    json.dumps(metadata)  # plain values only: Dagster check metadata

    # --partitions: days for day models, months for month models; without --models only the
    # partitioned models the requests name are verified.
    only_day = verify(project, warehouse, partitions=[day.isoformat()])
    assert {model.model for model in only_day.models} == {"daily_revenue"}
    assert [part.partition for part in only_day.model("daily_revenue").partitions] == [day.isoformat()]
    assert not only_day.model("daily_revenue").is_equal
    month = verify(project, warehouse, partitions=[f"{day:%Y-%m}"])
    assert {model.model for model in month.models} == {"monthly_revenue"}
    assert [part.partition for part in month.model("monthly_revenue").partitions] == [
        day.replace(day=1).isoformat()
    ]
    both = verify(project, warehouse, partitions=[day.isoformat(), f"{day:%Y-%m}"])
    assert {model.model for model in both.models} == {"daily_revenue", "monthly_revenue"}
    other = (day.replace(day=1) + dt.timedelta(days=40)).isoformat()
    assert verify(project, warehouse, models=["daily_revenue"], partitions=[other]).is_equal
    # An unpartitioned model named beside a partitioned one is compared whole.
    mixed = verify(project, warehouse, models=["stg_customers", "daily_revenue"], partitions=[other])
    assert mixed.model("stg_customers").partitions == () and mixed.is_equal


def test_partitions_are_checked_as_run_checks_them(built):
    """A future day, a day for a month model, a month for a day model, or only unpartitioned
    models selected: E040, never "equal" over no partitions."""
    project, warehouse = built
    cases = [
        ({"partitions": ["2099-01-01"]}, "in the future"),
        ({"models": ["monthly_revenue"], "partitions": ["2025-02-03"]}, "names days"),
        ({"models": ["daily_revenue"], "partitions": ["2025-02"]}, "names months"),
        ({"models": ["stg_customers"], "partitions": ["2025-02-03"]}, "no selected model is partitioned"),
        ({"partitions": ["2020-01-01"]}, "lies before"),
    ]
    for arguments, needle in cases:
        with pytest.raises(StrataError) as caught:
            verify(project, warehouse, **arguments)
        assert caught.value.code == "E040" and needle in caught.value.message, (arguments, caught.value)


def test_selection_errors(tmp_path, built):
    project, warehouse = built
    with pytest.raises(StrataError) as caught:
        verify(project, warehouse, models=["nope"])
    assert caught.value.code == "E025"
    for bad in ("2025-13", "2025-02-30", "feb", "2025/02/01"):
        with pytest.raises(StrataError) as caught:
            verify(project, warehouse, partitions=[bad])
        assert caught.value.code == "E040", bad
    fresh_project, fresh_warehouse = make_shop(tmp_path / "fresh")
    with pytest.raises(StrataError) as caught:
        verify(fresh_project, fresh_warehouse, models=["stg_orders"])
    assert caught.value.code == "E041"
    operations.create_branch(warehouse, "dev")
    assert verify(project, warehouse, models=["stg_customers"], branch="dev").is_equal


def test_scratch_space_never_remains(built, monkeypatch):
    project, warehouse = built
    before = live_state(warehouse)
    verify(project, warehouse)
    assert scratch_tables(warehouse) == []
    assert live_state(warehouse) == before

    def broken(*args, **kwargs):
        raise RuntimeError("comparison failed")

    monkeypatch.setattr(verify_module, "compare", broken)
    with pytest.raises(RuntimeError):
        verify(project, warehouse)
    assert scratch_tables(warehouse) == []
    assert live_state(warehouse) == before


def test_a_crash_during_verification_leaves_nothing(built):
    project, warehouse = built
    before = live_state(warehouse)
    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "strata_dagster.cli.main",
            "verify",
            str(project),
            "--warehouse",
            str(warehouse),
        ],
        env={**os.environ, KILL_AT_ENV: "verify_rebuilt"},
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9
    assert scratch_tables(warehouse) == []
    assert live_state(warehouse) == before
    assert verify(project, warehouse).is_equal


def test_cli_prints_a_table_and_exits_by_result(built):
    project, warehouse = built
    runner = CliRunner()
    args = ["verify", str(project), "--warehouse", str(warehouse)]
    equal = runner.invoke(main, args)
    assert equal.exit_code == 0, equal.output
    assert "9 models equal to a full rebuild" in equal.output
    assert "daily_revenue" in equal.output and "DIFFERS" not in equal.output

    order_id, _, _, day = paid_order(warehouse)
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 10 WHERE order_id = ?", params=[order_id])
    run_project(project, warehouse, only_stale=True)
    differs = runner.invoke(main, [*args, "--models", "stg_orders,daily_revenue"])
    assert differs.exit_code == 1
    assert "2 of 2 models differ" in differs.output
    assert "DIFFERS" in differs.output and day.isoformat() in differs.output
    assert "`amount` totals" in differs.output and "(delta -10.00)" in differs.output

    unknown = runner.invoke(main, [*args, "--models", "nope"])
    assert unknown.exit_code == 1 and "error[E025]" in unknown.output
    assert "Traceback" not in unknown.output


def test_a_source_column_whose_type_changed_is_reported_not_a_traceback(built):
    """Live rows hold DECIMAL amounts, a rebuild now gives DOUBLE ones: the totals of the two types
    are compared and subtracted, and the type difference is named."""
    project, warehouse = built
    order_id, *_ = paid_order(warehouse)
    execute(warehouse, "ALTER TABLE raw.orders ALTER COLUMN amount TYPE DOUBLE")
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 0.5 WHERE order_id = ?", params=[order_id])
    result = CliRunner().invoke(
        main, ["verify", str(project), "--warehouse", str(warehouse), "--models", "stg_orders"]
    )
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # the exit code, no crash
    assert "`amount` is DECIMAL(12,2) incrementally, DOUBLE in full" in result.output
    assert "715,329.15 in full, 715,328.65 incrementally (delta -0.50)" in result.output


def test_figures_and_totals():
    assert ColumnTotal("x", 0.1 + 0.2, 0.3).is_equal  # float sums differ with the order of rows
    assert not ColumnTotal("x", 1.0, 1.001).is_equal
    assert ColumnTotal("x", None, None).is_equal and not ColumnTotal("x", Decimal(0), None).is_equal
    assert Figures().is_equal and Figures().row_delta == 0
    assert Figures(3, 3, history_rows=2).is_equal  # history is not a difference
    figures = Figures(5, 4, 1, 0, 0, 1, (ColumnTotal("amount", Decimal("3.50"), Decimal("2.50")),))
    assert figures.row_delta == -1 and not figures.is_equal
    assert figures.as_metadata()["numeric_totals"] == {
        "amount": {"full": "3.50", "incremental": "2.50", "is_equal": False}
    }


def test_a_difference_a_backfill_correction_explains_is_named_with_how_to_compare(tmp_path):
    """A backfill published rows read from a corrected table; the source itself is unchanged, so a
    rebuild from it differs. The report says which entry read what, and how to compare with it."""
    project, warehouse = make_shop(tmp_path, rows=300)
    first = run_project(project, warehouse)
    execute(
        warehouse,
        "CREATE TABLE raw.orders_fixed AS SELECT * FROM raw.orders",
        "UPDATE raw.orders_fixed SET amount = amount + 1000 WHERE order_id = 3",
    )
    args = ["--warehouse", str(warehouse)]
    backfilled = CliRunner().invoke(
        main,
        [
            "backfill",
            str(project),
            first.run_id,
            *args,
            "--reason",
            "fix order 3",
            "--source",
            "orders=raw.orders_fixed",
        ],
    )
    assert backfilled.exit_code == 0, backfilled.output
    report = verify(project, warehouse)
    differing = [model.model for model in report.mismatched]
    assert "stg_orders" in differing
    note = report.model("stg_orders").note
    assert note is not None and "(fix order 3), which read `orders` from `raw.orders_fixed`" in note
    assert "`--source orders=raw.orders_fixed`" in note
    assert all(report.model(name).note == note for name in differing)
    assert report.model("stg_customers").note is None
    assert report.model("stg_orders").as_metadata()["note"] == note
    printed = CliRunner().invoke(main, ["verify", str(project), *args])
    assert printed.exit_code == 1
    assert f"note: the live states of {', '.join(differing)} were built by backfill" in " ".join(
        printed.output.split()
    )
    same = verify(project, warehouse, overrides={"orders": "raw.orders_fixed"})
    assert same.is_equal and all(model.note is None for model in same.models)
