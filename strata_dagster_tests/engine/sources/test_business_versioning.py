"""Business-driven versioning (`versioning: append_only_partitions`): the ledger, the delta of new
partitions only, and the three assumption checks under both policies, on real hive-partitioned
Parquet folders and on a table, each compared with a full recompute."""

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from strata_dagster.cli.main import main
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources, peek_source_fingerprints
from strata_dagster.errors import StrataError
from strata_dagster.state.migrations import MIGRATIONS, READABLE_WITHOUT_MIGRATING
from strata_dagster_tests.support.business_support import (
    day,
    full_daily_totals,
    full_events_log,
    make_file_project,
    make_table_project,
    write_file_partition,
    write_table_partition,
)
from strata_dagster_tests.support.engine_support import execute, history_count, row_multiset, sql
from strata_dagster_tests.support.paths import REPO

REBUILD = "  on_violation: rebuild"
EVENTS_EXAMPLE = REPO / "examples" / "events"


def _files(project) -> str:
    return f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"


def _assert_equal_to_full(warehouse, source: str) -> None:
    for view, query in (("events_log", full_events_log), ("daily_totals", full_daily_totals)):
        assert row_multiset(warehouse, f"main.v_{view}") == row_multiset(warehouse, f"({query(source)})"), (
            view
        )


def _ledger(warehouse) -> list[str]:
    rows = sql(
        warehouse, "SELECT partition_key FROM strata.source_ledger WHERE NOT is_reset ORDER BY entry, 1"
    )
    return [row[0] for row in rows]


def _versions(warehouse) -> dict:
    (detail,) = sql(warehouse, "SELECT detail FROM strata.entries ORDER BY entry DESC LIMIT 1")[0]
    return json.loads(detail)["source_versions"]["events"]


def test_a_new_folder_is_the_whole_delta_of_both_models(tmp_path):
    project, warehouse = make_file_project(tmp_path)
    for index in range(3):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    write_file_partition(project, 3, 4)
    result = run_project(project, warehouse)
    log, totals = result.outcome("events_log"), result.outcome("daily_totals")
    assert (log.path, log.detail["rows_read"]) == ("delta", 4)
    assert (totals.path, totals.detail["partitions"]) == ("partitions", [day(3).isoformat()])
    new_file = str(project / "events" / f"dt={day(3).isoformat()}" / "part-0.parquet")
    for outcome in (log, totals):  # the new folder's file by name, never a glob of every folder
        assert new_file in outcome.detail["segment_sql"]
        assert "*/*.parquet" not in outcome.detail["segment_sql"]
    assert _ledger(warehouse) == [day(index).isoformat() for index in range(4)]
    assert _versions(warehouse)["last_partition"] == day(3).isoformat()
    assert _versions(warehouse)["new_partitions"] == [day(3).isoformat()]
    _assert_equal_to_full(warehouse, _files(project))
    assert run_project(project, warehouse, only_stale=True).is_noop


def _consumed(tmp_path, extra: str = ""):
    project, warehouse = make_file_project(tmp_path, extra)
    for index in range(3):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    return project, warehouse


def _rewrite(project):
    write_file_partition(project, 1, 6, seed=1)


def _add_file(project):
    write_file_partition(project, 1, 2, seed=2, part=1)


def _remove(project):
    shutil.rmtree(project / "events" / f"dt={day(0).isoformat()}")


def _backfill(project):
    write_file_partition(project, 5, 3)
    run_project(project, project.parent / "w.duckdb")
    write_file_partition(project, 4, 3)  # a slot before the last consumed one


VIOLATIONS = [
    ("rewritten", _rewrite, "E052", day(1)),
    ("file_added", _add_file, "E052", day(1)),
    ("removed", _remove, "E052", day(0)),
    ("backfilled", _backfill, "E053", day(4)),
]


@pytest.mark.parametrize(("kind", "change", "code", "partition"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_a_violation_is_a_coded_error_naming_source_and_partition_and_publishes_nothing(
    tmp_path, kind, change, code, partition
):
    project, warehouse = _consumed(tmp_path)
    change(project)
    entries = history_count(warehouse)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == code
    assert caught.value.subject == f"events/{partition.isoformat()}"
    assert history_count(warehouse) == entries


@pytest.mark.parametrize(("kind", "change", "code", "partition"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_under_on_violation_rebuild_the_models_equal_a_full_recompute_and_history_says_why(
    tmp_path, kind, change, code, partition
):
    project, warehouse = _consumed(tmp_path, REBUILD)
    change(project)
    result = run_project(project, warehouse)
    assert partition.isoformat() in _versions(warehouse)["ledger_reset"]
    assert "new partition ledger" in result.outcome("events_log").detail["full_reason"]
    _assert_equal_to_full(warehouse, _files(project))


def test_a_partition_without_its_completeness_marker_waits_and_so_do_later_ones(tmp_path):
    project, warehouse = make_file_project(tmp_path, "  complete_when: '_SUCCESS'")
    write_file_partition(project, 0, 5, marker="_SUCCESS")
    write_file_partition(project, 1, 5)  # still being written
    write_file_partition(project, 2, 5, marker="_SUCCESS")
    run_project(project, warehouse)
    assert _ledger(warehouse) == [day(0).isoformat()]
    assert _versions(warehouse)["deferred_partitions"] == [day(1).isoformat(), day(2).isoformat()]
    assert sql(warehouse, "SELECT count(*) FROM main.v_events_log") == [(5,)]
    write_file_partition(project, 1, 7, marker="_SUCCESS")  # the writer finishes the folder
    run_project(project, warehouse)
    assert _ledger(warehouse)[1:] == [day(1).isoformat(), day(2).isoformat()]
    _assert_equal_to_full(warehouse, _files(project))


def test_files_outside_partition_folders_are_e051(tmp_path):
    project, warehouse = make_file_project(tmp_path)
    write_file_partition(project, 0, 5)
    stray = project / "events" / "loose"
    stray.mkdir()
    shutil.copy(next((project / "events").glob("dt=*/*.parquet")), stray / "x.parquet")
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E051"


def test_table_source_delta_settle_and_violations(tmp_path):
    project, warehouse = make_table_project(tmp_path, "  settle: 1")
    for index in range(3):
        write_table_partition(warehouse, index, 5)
    run_project(project, warehouse)
    assert _ledger(warehouse) == [day(0).isoformat(), day(1).isoformat()]  # the newest one settles
    assert sql(warehouse, "SELECT count(*) FROM main.v_events_log") == [(10,)]
    write_table_partition(warehouse, 3, 4)
    result = run_project(project, warehouse)
    assert result.outcome("events_log").detail["rows_read"] == 5
    assert result.outcome("daily_totals").detail["partitions"] == [day(2).isoformat()]
    settled = f"(SELECT * FROM raw.events WHERE dt <= DATE '{day(2).isoformat()}')"
    _assert_equal_to_full(warehouse, settled)
    write_table_partition(warehouse, 0, 1, seed=9)  # a row into a consumed day
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert (caught.value.code, caught.value.subject) == ("E052", f"events/{day(0).isoformat()}")


def test_table_source_backfill_is_e053_and_rebuilds_under_the_rebuild_policy(tmp_path):
    project, warehouse = make_table_project(tmp_path)
    for index in (0, 1, 3):
        write_table_partition(warehouse, index, 5)
    run_project(project, warehouse)
    write_table_partition(warehouse, 2, 5)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert (caught.value.code, caught.value.subject) == ("E053", f"events/{day(2).isoformat()}")
    (project / "events.strata").write_text(
        (project / "events.strata")
        .read_text()
        .replace("\n}\nmodel events_log", f"\n{REBUILD}\n}}\nmodel events_log", 1)
    )
    run_project(project, warehouse)
    _assert_equal_to_full(warehouse, "raw.events")


def test_full_refresh_starts_a_new_ledger_over_a_violation(tmp_path):
    project, warehouse = _consumed(tmp_path)
    _rewrite(project)
    run_project(project, warehouse, full_refresh=True)
    assert _versions(warehouse)["ledger_reset"] == "full refresh requested"
    _assert_equal_to_full(warehouse, _files(project))


def _verify_sources(project, warehouse):
    return CliRunner().invoke(main, ["verify", str(project), "--warehouse", str(warehouse), "--sources"])


def test_verify_sources_rehashes_consumed_partitions_and_finds_an_edit_evidence_cannot_see(tmp_path):
    project, warehouse = make_table_project(tmp_path)
    for index in range(2):
        write_table_partition(warehouse, index, 5)
    run_project(project, warehouse)
    clean = _verify_sources(project, warehouse)
    assert clean.exit_code == 0, clean.output
    assert "equal to its ledger" in clean.output
    # Same row count and range of `dt`: the cheap evidence of every run cannot tell.
    sql(warehouse, f"UPDATE raw.events SET amount = amount + 100 WHERE id = 100001 AND dt = DATE '{day(1)}'")
    assert run_project(project, warehouse, only_stale=True).is_noop
    edited = _verify_sources(project, warehouse)
    assert edited.exit_code == 1
    assert "error[E054]" in edited.output and f"events/{day(1).isoformat()}" in edited.output


def test_history_and_replay_show_the_source_version(tmp_path):
    project, warehouse = _consumed(tmp_path)
    write_file_partition(project, 3, 2)
    result = run_project(project, warehouse)
    versions = result.outcome("events_log").detail["source_versions"]
    assert versions["events"]["last_partition"] == day(3).isoformat()
    shown = CliRunner().invoke(main, ["history", str(project), "--warehouse", str(warehouse)])
    assert shown.exit_code == 0, shown.output
    assert (
        f"source events at {day(3).isoformat()}: 4 partitions consumed; new: {day(3).isoformat()}"
        in shown.output
    )
    replayed = CliRunner().invoke(
        main, ["replay", str(project), result.run_id, "--warehouse", str(warehouse)]
    )
    assert replayed.exit_code == 0, replayed.output
    assert f"source events at {day(3).isoformat()}" in replayed.output


def test_an_observation_reads_the_ledger_and_listing_and_matches_what_the_run_records(tmp_path):
    project, warehouse = _consumed(tmp_path)
    recorded = sql(warehouse, "SELECT fingerprint FROM strata.entry_sources WHERE source = 'events'")[0][0]
    assert observe_sources(project, warehouse, ["events"])["events"].fingerprint == recorded
    write_file_partition(project, 3, 2)
    assert observe_sources(project, warehouse, ["events"])["events"].fingerprint != recorded
    run_project(project, warehouse)
    latest = sql(
        warehouse, "SELECT fingerprint FROM strata.entry_sources WHERE source = 'events' ORDER BY entry DESC"
    )
    assert observe_sources(project, warehouse, ["events"])["events"].fingerprint == latest[0][0]
    _rewrite(project)  # a broken assumption still shows as a change, for the run to report
    assert observe_sources(project, warehouse, ["events"])["events"].fingerprint != latest[0][0]


def test_the_events_example_gets_its_daily_drops_from_sample_data_and_builds_one_new_day(tmp_path):
    project = tmp_path / "events"
    shutil.copytree(EVENTS_EXAMPLE, project, ignore=shutil.ignore_patterns("events", "*.duckdb*"))
    warehouse = tmp_path / "w.duckdb"
    for days in (3, 4):
        written = CliRunner().invoke(
            main, ["sample-data", str(project), "--days", str(days), "--rows", "400"]
        )
        assert written.exit_code == 0, written.output
        result = run_project(project, warehouse)
    assert sorted(path.name for path in (project / "events").iterdir())[-1] == "dt=2026-01-04"
    assert result.outcome("events_log").path == "delta"
    assert result.outcome("daily_kinds").detail["partitions"] == ["2026-01-04"]


def _expiring(tmp_path, retained: int):
    project, warehouse = make_file_project(tmp_path)
    module = project / "events.strata"
    module.write_text(module.read_text().replace("append_only_partitions", f"partition_expiry({retained})"))
    for index in range(4):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    return project, warehouse


def test_partition_expiry_drops_the_expired_days_rows_from_every_model(tmp_path):
    project, warehouse = _expiring(tmp_path, 2)
    shutil.rmtree(project / "events" / f"dt={day(0).isoformat()}")  # the retention job
    write_file_partition(project, 4, 3)
    result = run_project(project, warehouse)
    assert "expired" in result.outcome("events_log").detail["full_reason"]
    assert result.outcome("daily_totals").detail["partitions"] == [day(0).isoformat(), day(4).isoformat()]
    assert _versions(warehouse)["expired_partitions"] == [day(0).isoformat()]
    _assert_equal_to_full(warehouse, _files(project))
    write_file_partition(project, 5, 2)  # the expiry is recorded once: the next run is a delta again
    assert run_project(project, warehouse).outcome("events_log").path == "delta"
    _assert_equal_to_full(warehouse, _files(project))


def test_partition_expiry_still_refuses_a_retained_partition_that_disappears(tmp_path):
    project, warehouse = _expiring(tmp_path, 3)
    shutil.rmtree(project / "events" / f"dt={day(2).isoformat()}")  # inside the newest 3
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert (caught.value.code, caught.value.subject) == ("E052", f"events/{day(2).isoformat()}")


def _as_at_version(warehouse, version: int) -> None:
    """The warehouse as a strata whose last migration was `version` left it: what every later
    migration created or added is gone, and so are their version rows."""
    later = [statement for statements in MIGRATIONS[version:] for statement in statements]
    undone = [
        *(
            f"DROP TABLE strata.{table}"
            for table in re.findall(r"CREATE TABLE strata\.(\w+)", "\n".join(later))
        ),
        *(
            f"ALTER TABLE strata.{table} DROP COLUMN {column}"
            for table, column in re.findall(r"ALTER TABLE strata\.(\w+) ADD COLUMN (\w+)", "\n".join(later))
        ),
    ]
    assert len(undone) == len(later)  # each later statement creates a table or adds a column
    execute(warehouse, *undone, f"DELETE FROM strata.schema_version WHERE version > {version}")


def _as_before_ledgers(warehouse) -> None:
    first = next(
        number
        for number, statements in enumerate(MIGRATIONS, start=1)
        if any("strata.source_ledger " in statement for statement in statements)
    )
    _as_at_version(warehouse, first - 1)
    assert not sql(warehouse, "SELECT * FROM duckdb_tables() WHERE table_name = 'source_ledger'")


def test_plan_reads_a_warehouse_from_before_ledgers_and_the_next_run_starts_one(tmp_path):
    """`strata plan` opens the warehouse read-only, unmigrated, and reads in one transaction: a
    missing ledger table is no ledger, not an aborted transaction."""
    project, warehouse = make_file_project(tmp_path)
    for index in range(3):
        write_file_partition(project, index, 5)
    run_project(project, warehouse)
    seen = peek_source_fingerprints(project, warehouse, ["events"], timeout=5)
    _as_before_ledgers(warehouse)
    assert peek_source_fingerprints(project, warehouse, ["events"], timeout=5) == seen  # a sensor's look
    write_file_partition(project, 3, 4)
    planned = CliRunner().invoke(main, ["plan", str(project), "--warehouse", str(warehouse)])
    assert planned.exit_code == 1, planned.output  # 1: it would build
    assert "2 of 2 models would be built" in planned.output
    reason = plan_project(project, warehouse).model("events_log").reason
    assert "source `events` starts a new partition ledger (first read of the source)" in reason
    result = run_project(project, warehouse)
    assert result.outcome("events_log").detail["full_reason"].startswith("source `events` starts a new")
    assert _ledger(warehouse) == [day(index).isoformat() for index in range(4)]
    _assert_equal_to_full(warehouse, _files(project))


def test_a_read_only_command_on_a_history_too_old_to_read_says_so_and_a_run_upgrades_it(tmp_path):
    project, warehouse = make_file_project(tmp_path)
    write_file_partition(project, 0, 5)
    run_project(project, warehouse)
    _as_at_version(warehouse, READABLE_WITHOUT_MIGRATING - 1)
    write_file_partition(project, 1, 4)
    planned = CliRunner().invoke(main, ["plan", str(project), "--warehouse", str(warehouse)])
    assert planned.exit_code == 1 and "error[E020]" in planned.output, planned.output
    assert "older strata" in planned.output and "run `strata run` once" in planned.output
    assert planned.exception is None or isinstance(planned.exception, SystemExit)
    run_project(project, warehouse)
    assert plan_project(project, warehouse, only_stale=True).would_run is False
    _assert_equal_to_full(warehouse, _files(project))
