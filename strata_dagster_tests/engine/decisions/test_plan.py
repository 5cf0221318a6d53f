"""`strata plan`: what a run would do and why, read-only; the run then does what the plan said."""

import hashlib
import json

import duckdb
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, SHOP_MODELS, execute, make_shop


def invoke(*args: str):
    return CliRunner().invoke(main, ["plan", *args])


def file_digests(warehouse) -> dict[str, str | None]:
    """sha256 of the warehouse file and of its write-ahead log (None when absent)."""
    wal = warehouse.with_name(warehouse.name + ".wal")
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        for path in (warehouse, wal)
    }


def change_two_orders(warehouse) -> None:
    execute(
        warehouse,
        f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id IN (5, 17)",
    )


def test_plan_cli_text_json_exit_codes_and_no_write(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=800)
    args = (str(project), "--warehouse", str(warehouse))
    first = invoke(*args)
    assert first.exit_code == 1, first.output
    assert "first build" in first.output
    run_project(project, warehouse)

    unchanged = invoke(*args, "--only-stale")
    assert unchanged.exit_code == 0, unchanged.output
    assert "everything up to date (nothing to do)" in unchanged.output
    # Without --only-stale the selected models are recomputed, as `strata run` does.
    forced = json.loads(invoke(*args, "--json").output)
    assert {model["path"] for model in forced["models"]} == {"cutoff-candidate"}, forced

    change_two_orders(warehouse)
    before = file_digests(warehouse)
    text = invoke(*args, "--only-stale")
    as_json = invoke(*args, "--only-stale", "--json")
    assert file_digests(warehouse) == before  # the plan wrote nothing, not even its log
    assert text.exit_code == 1 and as_json.exit_code == 1
    assert "stg_orders" in text.output and "delta trusted" in text.output
    planned = {model["model"]: model for model in json.loads(as_json.output)["models"]}
    assert set(planned) == SHOP_MODELS
    stg = planned["stg_orders"]
    assert stg["path"] == "delta"
    (change,) = stg["changes"]
    assert change["input"] == "source:orders" and change["old"] != change["new"]
    assert stg["window"]["low"] < stg["window"]["high"]
    assert stg["rows_to_read"] >= 2
    assert planned["stg_customers"]["path"] == "reused"
    assert planned["daily_revenue"]["path"] == "depends"
    assert planned["daily_revenue"]["depends_on"] == ["stg_orders"]

    result = run_project(project, warehouse, only_stale=True)
    for outcome in result.outcomes:
        assert outcome.path in planned[outcome.model]["allowed_paths"], outcome.model


def test_plan_partitions_and_full_refresh(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=800)
    run_project(project, warehouse)
    requested = plan_project(
        project, warehouse, models=("daily_revenue",), partitions=("2025-01-02..2025-01-04",), only_stale=True
    )
    daily = requested.model("daily_revenue")
    assert daily.path == "partitions" and daily.partitions == ("2025-01-02..2025-01-04",)
    assert daily.is_exact and daily.partition_keys == ("2025-01-02", "2025-01-03", "2025-01-04")
    assert "--partitions" in daily.reason
    refresh = plan_project(project, warehouse, models=("stg_orders",), full_refresh=True)
    assert refresh.model("stg_orders").path == "full"
    assert "full refresh requested" in refresh.model("stg_orders").reason


def test_plan_errors_are_coded(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=200)
    unknown = invoke(str(project), "--warehouse", str(warehouse), "--models", "no_such_model")
    assert unknown.exit_code == 1 and "error[E025]" in unknown.output
    missing = invoke(str(project), "--warehouse", str(tmp_path / "absent.duckdb"))
    assert missing.exit_code == 1 and "error[E020]" in missing.output
    assert not (tmp_path / "absent.duckdb").exists()
    bad_source = invoke(str(project), "--warehouse", str(warehouse), "--source", "nothing=raw.orders")
    assert bad_source.exit_code == 1 and "error[E" in bad_source.output
    assert "Traceback" not in unknown.output + missing.output + bad_source.output


def test_plan_says_why_a_delta_falls_back(tmp_path):
    """A row written below the watermark: the plan names the gate's reason, and the run takes it."""
    project, warehouse = make_shop(tmp_path, rows=800)
    run_project(project, warehouse)
    execute(
        warehouse,
        "INSERT INTO raw.orders SELECT order_id + 100000, customer_id, order_ts, "
        "(SELECT min(updated_at) FROM raw.orders), status, amount, channel, tags "
        "FROM raw.orders WHERE order_id = 1",
    )
    planned = plan_project(project, warehouse, only_stale=True)
    stg = planned.model("stg_orders")
    assert stg.path == "full" and "appeared at or below the watermark" in stg.reason
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("stg_orders").path == "full"
    assert "appeared at or below the watermark" in result.outcome("stg_orders").detail["full_reason"]


def test_plan_reads_a_warehouse_another_reader_holds(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=200)
    run_project(project, warehouse)
    reader = duckdb.connect(str(warehouse), read_only=True)
    try:
        assert not plan_project(project, warehouse, only_stale=True).would_run
    finally:
        reader.close()


def test_after_a_rollback_plan_names_the_views_a_run_points_back(tmp_path):
    """Rolled back, every snapshot of the current build still exists: a run builds nothing but
    publishes them again, so the plan says so and exits 1 (it used to say "nothing to do")."""
    project, warehouse = make_shop(tmp_path, rows=400)
    args = (str(project), "--warehouse", str(warehouse), "--only-stale")
    first = run_project(project, warehouse)
    change_two_orders(warehouse)
    second = run_project(project, warehouse, only_stale=True)
    moved = sorted(outcome.model for outcome in second.outcomes if outcome.is_published)
    assert (
        CliRunner()
        .invoke(main, ["rollback", str(project), first.run_id, "--warehouse", str(warehouse)])
        .exit_code
        == 0
    )
    before = file_digests(warehouse)
    planned = invoke(*args)
    assert planned.exit_code == 1, planned.output
    assert (
        f"0 of {len(SHOP_MODELS)} models would be built; {len(moved)} reused snapshots published again (not what the branch shows now)"
        in " ".join(planned.output.split())
    )
    as_json = json.loads(invoke(*args, "--json").output)
    again_planned = [m for m in as_json["models"] if m["publishes_again"]]
    assert as_json["would_run"] and sorted(m["model"] for m in again_planned) == moved
    assert all(
        "the live view shows snapshot" in m["why"] and m["why"].endswith("publishes it again")
        for m in again_planned
    )
    assert file_digests(warehouse) == before
    again = run_project(project, warehouse, only_stale=True)
    assert sorted(outcome.model for outcome in again.outcomes if outcome.is_published) == moved
    assert all(outcome.path == "reused" for outcome in again.outcomes)
    settled = invoke(*args)
    assert settled.exit_code == 0 and "everything up to date (nothing to do)" in settled.output


def test_a_new_branch_is_planned_as_views_to_publish(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=300)
    run_project(project, warehouse)
    args = (str(project), "--warehouse", str(warehouse), "--branch", "dev", "--only-stale")
    planned = json.loads(invoke(*args, "--json").output)
    assert planned["would_run"] and all(model["publishes_again"] for model in planned["models"])
    assert all(
        model["why"].endswith("the branch has no view of it yet: the run publishes it")
        for model in planned["models"]
    )
    assert invoke(*args).exit_code == 1
    run_project(project, warehouse, branch="dev", only_stale=True)
    assert invoke(*args).exit_code == 0


def test_after_a_rollback_a_model_rebuilt_after_inputs_published_again_depends_on_them(tmp_path):
    """Rolled back over a run that built `stg_orders` and `daily_revenue` but not `monthly_revenue`:
    the run publishes the first two again and then rebuilds the month their rows reach. The plan
    names those partitions and says the model depends on the model published first (until then
    its live view agrees with its inputs' live views), as for an upstream rebuilt first."""
    project, warehouse = make_shop(tmp_path, rows=400)
    first = run_project(project, warehouse)
    change_two_orders(warehouse)
    run_project(project, warehouse, only_stale=True, models=["stg_orders", "daily_revenue"])
    rolled = CliRunner().invoke(main, ["rollback", str(project), first.run_id, "--warehouse", str(warehouse)])
    assert rolled.exit_code == 0, rolled.output
    planned = plan_project(project, warehouse, only_stale=True)
    assert planned.model("daily_revenue").publishes_again
    monthly = planned.model("monthly_revenue")
    assert monthly.path == "partitions" and monthly.depends_on == ("daily_revenue",)
    run = run_project(project, warehouse, only_stale=True)
    assert sorted(run.outcome("monthly_revenue").detail["partitions"]) == sorted(monthly.partition_keys)
