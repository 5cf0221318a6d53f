"""Bad new partitions of a business-versioned file source, as an operator meets them on a bad day:
a half-written or random-bytes file in a folder marked complete, a folder whose value is no date, a
file lacking a column, an empty partition, a folder still being written. Each is a coded error
naming the file or folder (never a traceback) on `run`, `plan`, the observations and Dagster's,
with nothing consumed or published and the live state as it was; `verify --sources` says exactly
what holds of the consumed partitions, reading them as the run read them."""

import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster import build_definitions
from strata_dagster.backends.duckdb.partition_evidence import first_matching_file
from strata_dagster.cli.main import main
from strata_dagster.engine.reads.arrivals import peek_arrivals
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.engine.sources.source_verify import mismatch_error, verify_sources
from strata_dagster.errors import StrataError
from strata_dagster.orchestration.sensors.stale_sensor import STALE_SENSOR_NAME
from strata_dagster_tests.support.business_support import (
    day,
    full_events_log,
    make_file_project,
    write_file_partition,
)
from strata_dagster_tests.support.dagster_support import execute_assets
from strata_dagster_tests.support.engine_support import history_count, row_multiset, sql
from strata_dagster_tests.support.engines_support import engine_under_test, normalised

MARKED = "  complete_when: '_SUCCESS'"
CONSUMED = 4  # days consumed before each case
VIEWS = ("main.v_events_log", "main.v_daily_totals")


def _consumed(tmp_path: Path, extra: str = MARKED) -> tuple[Path, Path]:
    project, warehouse = make_file_project(tmp_path, extra)
    for index in range(CONSUMED):
        write_file_partition(project, index, 5, marker="_SUCCESS")
    run_project(project, warehouse)
    return project, warehouse


def _folder(project: Path, name: str) -> Path:
    folder = project / "events" / f"dt={name}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _new_day(project: Path, index: int = CONSUMED) -> Path:
    """The next day's folder, marked complete, with the file `part-0.parquet` to be written."""
    folder = _folder(project, day(index).isoformat())
    (folder / "_SUCCESS").write_text("")
    return folder / "part-0.parquet"


def _good_bytes(project: Path) -> bytes:
    return (project / "events" / f"dt={day(0).isoformat()}" / "part-0.parquet").read_bytes()


def _truncated(project: Path) -> Path:
    path = _new_day(project)
    path.write_bytes(_good_bytes(project)[:300])
    return path


def _random_bytes(project: Path) -> Path:
    path = _new_day(project)
    path.write_bytes(bytes((index * 7919 + 13) % 256 for index in range(4096)))
    return path


def _torn_pages(project: Path) -> Path:
    """A file whose footer reads but whose pages do not (a torn write on a damaged disk)."""
    write_file_partition(project, CONSUMED, 2000, marker="_SUCCESS")
    path = project / "events" / f"dt={day(CONSUMED).isoformat()}" / "part-0.parquet"
    data = bytearray(path.read_bytes())
    for index in range(8, len(data) // 2):
        data[index] = (data[index] * 7 + 13) % 256
    path.write_bytes(bytes(data))
    return path


def _state(warehouse: Path) -> tuple:
    return (history_count(warehouse), *(row_multiset(warehouse, view) for view in VIEWS))


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _assert_coded(result, code: str) -> None:
    """A command that failed with the coded error, not an exception's traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert f"error[{code}]" in result.output and "Traceback" not in result.output, result.output


def _assert_refused(
    project: Path, warehouse: Path, code: str, subject: str, *, is_observed: bool = True
) -> StrataError:
    """`run`, `plan` and (`is_observed`: when the listing and footers show it) the observations
    refuse the source with `code` naming `subject`; nothing is published (the history and the live
    views are as they were); `verify --sources` finds every consumed partition equal to its ledger."""
    before = _state(warehouse)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert (caught.value.code, caught.value.subject) == (code, subject)
    assert _state(warehouse) == before
    for command in ("run", "plan"):
        _assert_coded(_cli(command, str(project), "--warehouse", str(warehouse)), code)
    if is_observed:
        with pytest.raises(StrataError) as observed:
            observe_sources(project, warehouse, ["events"])
        assert observed.value.code == code
        with pytest.raises(StrataError) as peeked:
            peek_arrivals(project, warehouse, ["events"])
        assert peeked.value.code == code
    assert _state(warehouse) == before
    verified = _cli("verify", str(project), "--warehouse", str(warehouse), "--sources")
    assert verified.exit_code == 0, verified.output
    assert f"events: {CONSUMED} consumed partition(s), equal to its ledger" in verified.output
    return caught.value


BROKEN_FILES = [("truncated", _truncated), ("random_bytes", _random_bytes), ("torn_pages", _torn_pages)]


@pytest.mark.parametrize(("kind", "damage"), BROKEN_FILES, ids=[kind for kind, _ in BROKEN_FILES])
def test_an_unreadable_file_in_a_new_complete_folder_is_e056_naming_it_and_publishes_nothing(
    tmp_path, kind, damage
):
    project, warehouse = _consumed(tmp_path)
    path = damage(project)
    # An observation reads footers, no row: a file whose pages alone are torn is the run's to find.
    is_observed = kind != "torn_pages"
    error = _assert_refused(
        project, warehouse, "E056", f"events/{day(CONSUMED).isoformat()}", is_observed=is_observed
    )
    assert str(path) in error.message and "_SUCCESS" in error.message
    write_file_partition(project, CONSUMED, 3, marker="_SUCCESS")  # the writer writes it again, whole
    result = run_project(project, warehouse)
    assert result.outcome("events_log").path == "delta"
    assert row_multiset(warehouse, VIEWS[0]) == row_multiset(
        warehouse, f"({full_events_log(_files(project))})"
    )


def test_without_a_marker_an_unreadable_new_file_is_e056_saying_how_to_wait_for_writers(tmp_path):
    project, warehouse = _consumed(tmp_path, "")
    path = _folder(project, day(CONSUMED).isoformat()) / "part-0.parquet"
    path.write_bytes(_good_bytes(project)[:300])
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E056" and str(path) in caught.value.message
    assert "complete_when" in (caught.value.hint or "")


def test_a_full_refresh_over_an_unreadable_consumed_file_is_e056_and_keeps_the_live_state(tmp_path):
    project, warehouse = _consumed(tmp_path)
    path = project / "events" / f"dt={day(1).isoformat()}" / "part-0.parquet"
    size = path.stat().st_size
    path.write_bytes(bytes(size))  # zeros, same size: every run's evidence stays equal
    before = _state(warehouse)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse, full_refresh=True)
    assert (caught.value.code, caught.value.subject) == ("E056", f"events/{day(1).isoformat()}")
    assert _state(warehouse) == before


def _files(project: Path) -> str:
    return f"read_parquet('{project}/events/*/*.parquet', hive_partitioning = true)"


MISNAMED = ["garbage", "2026-13-45", "2026-02-30", "20260305", ""]


@pytest.mark.parametrize("value", MISNAMED, ids=[value or "empty" for value in MISNAMED])
def test_a_folder_whose_value_is_no_date_is_e057_naming_it_and_verify_stays_true(tmp_path, value):
    project, warehouse = _consumed(tmp_path)
    folder = _folder(project, value)
    shutil.copy(project / "events" / f"dt={day(0).isoformat()}" / "part-0.parquet", folder)
    (folder / "_SUCCESS").write_text("")
    error = _assert_refused(project, warehouse, "E057", f"events/dt={value}")
    assert f"{folder}/" in error.message
    shutil.rmtree(folder)  # the operator moves it away: the source runs on
    write_file_partition(project, CONSUMED, 3, marker="_SUCCESS")
    assert run_project(project, warehouse).outcome("events_log").path == "delta"


def test_a_misnamed_folder_still_being_written_is_e057_too(tmp_path):
    """Not waited for: DuckDB would type the folder column as text, so no statement over the
    source's glob reads around it, marker or not."""
    project, warehouse = _consumed(tmp_path)
    folder = _folder(project, "2026-3-9")
    shutil.copy(project / "events" / f"dt={day(0).isoformat()}" / "part-0.parquet", folder)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert (caught.value.code, caught.value.subject) == ("E057", "events/dt=2026-3-9")


BATCHES = """source batches {
  path: 'batches/*/*.parquet'
  partitioned_by: batch
  start: 1
  versioning: append_only_partitions
  immutable_partitions: true
  monotonic_partitions: true
}
model batch_log {
  from batches
  incremental
  merge_strategy: append
  cdc_column: batch
}
"""


def test_an_integer_keyed_source_refuses_a_folder_that_is_no_integer(tmp_path):
    project = tmp_path / "project"
    (project / "batches").mkdir(parents=True)
    (project / "batches.strata").write_text(BATCHES)
    warehouse = tmp_path / "w.duckdb"
    for batch in ("1", "2", "2026-03-01"):
        folder = project / "batches" / f"batch={batch}"
        folder.mkdir()
        duckdb.sql(f"COPY (SELECT 1 AS id) TO '{folder / 'part-0.parquet'}' (FORMAT parquet)")
        if batch == "2":
            run_project(project, warehouse)
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert (caught.value.code, caught.value.subject) == ("E057", "batches/batch=2026-03-01")
    assert "an integer" in caught.value.message


def test_the_schema_is_read_from_a_partition_not_from_a_misnamed_folder(tmp_path):
    """Whichever folder the file system lists first, the source's schema (and so its partition
    column's type) is read from a real partition: `dt=0000-00-00/` is the run's E057, never an
    E050 over a VARCHAR column typed from that one folder."""
    project, warehouse = make_file_project(tmp_path)
    write_file_partition(project, 0, 5)
    folder = _folder(project, "0000-00-00")
    shutil.copy(project / "events" / f"dt={day(0).isoformat()}" / "part-0.parquet", folder)
    found = first_matching_file(f"{project}/events/*/*.parquet", "dt")
    assert found == f"{project}/events/dt={day(0).isoformat()}/part-0.parquet"
    with pytest.raises(StrataError) as caught:
        run_project(project, warehouse)
    assert caught.value.code == "E057"


def test_a_new_file_lacking_a_column_is_e058_naming_it(tmp_path):
    project, warehouse = _consumed(tmp_path)
    write_file_partition(project, CONSUMED, 3, marker="_SUCCESS")
    path = _new_day(project, CONSUMED + 1)
    duckdb.sql(f"COPY (SELECT range AS id FROM range(3)) TO '{path}' (FORMAT parquet)")
    error = _assert_refused(project, warehouse, "E058", f"events/{day(CONSUMED + 1).isoformat()}")
    assert str(path) in error.message and "`amount`" in error.message


def test_a_consumed_empty_partition_verifies_unchanged(tmp_path):
    project, warehouse = _consumed(tmp_path)
    path = _new_day(project)
    duckdb.sql(f"COPY (SELECT 1::BIGINT AS id, 1::BIGINT AS amount LIMIT 0) TO '{path}' (FORMAT parquet)")
    run_project(project, warehouse)
    consumed = sql(
        warehouse,
        "SELECT row_count FROM strata.source_ledger WHERE partition_key = ?",
        [day(CONSUMED).isoformat()],
    )
    assert consumed == [(0,)]
    checks = verify_sources(project, warehouse)
    assert mismatch_error(checks) is None
    verified = _cli("verify", str(project), "--warehouse", str(warehouse), "--sources")
    assert verified.exit_code == 0, verified.output
    assert f"events: {CONSUMED + 1} consumed partition(s), equal to its ledger" in verified.output


def test_verify_sources_leaves_a_folder_still_being_written_to_the_run(tmp_path):
    project, warehouse = _consumed(tmp_path)
    folder = _folder(project, day(CONSUMED).isoformat())  # no _SUCCESS yet: the writer is at it
    (folder / "part-0.parquet").write_bytes(_good_bytes(project)[:300])
    assert run_project(project, warehouse, only_stale=True).is_noop
    verified = _cli("verify", str(project), "--warehouse", str(warehouse), "--sources")
    assert verified.exit_code == 0, verified.output
    assert f"events: {CONSUMED} consumed partition(s), equal to its ledger" in verified.output


def test_verify_sources_names_the_consumed_partition_whose_file_went_bad_and_only_it(tmp_path):
    project, warehouse = _consumed(tmp_path)
    path = project / "events" / f"dt={day(2).isoformat()}" / "part-0.parquet"
    path.write_bytes(bytes(path.stat().st_size))
    checks = verify_sources(project, warehouse)
    (check,) = checks
    assert [part.partition for part in check.mismatched] == [day(2).isoformat()]
    assert str(path) in (check.mismatched[0].problem or "")
    error = mismatch_error(checks)
    assert error is not None and (error.code, error.subject) == ("E054", f"events/{day(2).isoformat()}")
    verified = _cli("verify", str(project), "--warehouse", str(warehouse), "--sources")
    _assert_coded(verified, "E054")


def test_a_marker_without_files_is_no_partition(tmp_path):
    project, warehouse = _consumed(tmp_path)
    (_folder(project, day(CONSUMED).isoformat()) / "_SUCCESS").write_text("")
    write_file_partition(project, CONSUMED + 1, 3, marker="_SUCCESS")
    result = run_project(project, warehouse)
    assert result.outcome("events_log").detail["rows_read"] == 3
    verified = _cli("verify", str(project), "--warehouse", str(warehouse), "--sources")
    assert verified.exit_code == 0, verified.output


def test_a_dagster_observation_of_a_bad_new_partition_fails_with_the_code(tmp_path):
    project, warehouse = _consumed(tmp_path)
    _truncated(project)
    defs = build_definitions(project, warehouse=warehouse)
    result = execute_assets(defs, dg.DagsterInstance.ephemeral(), ["events"])
    assert not result.success
    (failure,) = [
        event for event in result.all_events if event.event_type == dg.DagsterEventType.STEP_FAILURE
    ]
    data = failure.step_failure_data.user_failure_data
    assert data is not None and data.description.startswith("error[E056]")
    assert {key: value.value for key, value in data.metadata.items()}["strata/error_code"] == "E056"


def test_the_stale_sensor_skips_its_tick_over_a_bad_new_partition_naming_the_code(tmp_path):
    project, warehouse = _consumed(tmp_path)
    folder = _folder(project, "garbage")
    shutil.copy(project / "events" / f"dt={day(0).isoformat()}" / "part-0.parquet", folder)
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    sensor = defs.resolve_sensor_def(STALE_SENSOR_NAME)
    tick = sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
    )
    assert not tick.run_requests
    assert "error[E057]" in (tick.skip_message or "") and "dt=garbage" in (tick.skip_message or "")


@pytest.mark.spark
def test_on_spark_a_bad_new_partition_is_the_same_coded_error_and_publishes_nothing(tmp_path, spark):
    project, _ = make_file_project(tmp_path / "files", MARKED)
    for index in range(2):
        write_file_partition(project, index, 5, marker="_SUCCESS")
    with engine_under_test("spark", tmp_path) as engine:
        engine.run(project)
        before = normalised(engine.live("events_log"))
        path = _new_day(project, 2)
        path.write_bytes(_good_bytes(project)[:300])
        with pytest.raises(StrataError) as caught:
            engine.run(project)
        assert (caught.value.code, caught.value.subject) == ("E056", f"events/{day(2).isoformat()}")
        shutil.rmtree(path.parent)
        folder = _folder(project, "garbage")
        shutil.copy(project / "events" / f"dt={day(0).isoformat()}" / "part-0.parquet", folder)
        with pytest.raises(StrataError) as caught:
            engine.run(project)
        assert (caught.value.code, caught.value.subject) == ("E057", "events/dt=garbage")
        assert normalised(engine.live("events_log")) == before
        with engine.chosen():  # the consumed partitions read from their own files, not the glob
            assert mismatch_error(verify_sources(project, engine.warehouse)) is None
