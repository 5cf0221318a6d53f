"""A source in a DuckDB database file is not scanned again while its file stays as a scan found it.

A run records the figures of each scan under the stamp of the source's file (its and its WAL's
inode, size and times) once the file has settled; a later read that finds the same stamp takes
them. Every kind of write must show: each case below writes after a recorded scan, and the next
run must give what a fresh warehouse reads from the file.
"""

import os
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from strata_dagster.backends.file_stamps import database_stamp
from strata_dagster.cli.main import main
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources, peek_source_fingerprints
from strata_dagster_tests.support.engine_support import execute, row_multiset
from strata_dagster_tests.support.stamp_support import (
    assert_a_hidden_write_is_found_by_verify,
    fresh_fingerprint,
    recorded,
    settle,
)


def write_source(path: Path, *statements: str, checkpoint: bool = True) -> None:
    con = duckdb.connect(str(path))
    try:
        if not checkpoint:
            # The commit stays in the write-ahead log: the database file itself is not written.
            con.execute("SET checkpoint_threshold = '10GB'")
            con.execute("PRAGMA disable_checkpoint_on_shutdown")
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()


@pytest.fixture
def stamped(tmp_path):
    source = tmp_path / "ingest.duckdb"
    write_source(
        source,
        "CREATE TABLE orders AS SELECT range AS id, range % 7 AS status, range * 3 AS amount FROM range(5000)",
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.strata").write_text(
        f"source orders {{\n  database: '{source}'\n  table: orders\n}}\n"
        "model copy {\n  from orders\n}\n"
        "model by_status {\n  from orders\n  group status\n  aggregate n = count(*), total = sum(amount)\n}\n"
    )
    return project, tmp_path / "warehouse.duckdb", source


def assert_live_models_read_the_file(project: Path, warehouse: Path, source: Path) -> None:
    assert row_multiset(warehouse, "main.v_copy") == execute(
        source, "SELECT CAST(r AS VARCHAR), count(*) FROM orders AS r GROUP BY 1 ORDER BY 1"
    )
    expected = execute(source, "SELECT status, count(*), sum(amount) FROM orders GROUP BY 1 ORDER BY 1")
    assert execute(warehouse, "SELECT status, n, total FROM main.v_by_status ORDER BY 1") == expected


def test_a_settled_file_is_read_from_the_record_of_its_last_scan(stamped):
    project, warehouse, source = stamped
    settle()
    run_project(project, warehouse)
    [(name, stamp, rows, hash_sum)] = recorded(warehouse)
    assert (name, stamp, rows) == ("orders", database_stamp(source).text, 5000)
    truth = fresh_fingerprint(project, warehouse.parent)
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint == truth
    # The record is what a read takes: altered, it changes the figures a read gives.
    execute(warehouse, "UPDATE strata.source_stamps SET row_hash_sum = '12345'")
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint != truth
    assert peek_source_fingerprints(project, warehouse, ["orders"], timeout=5)["orders"] != truth
    # A record another engine computed (another strata or DuckDB version) is not taken.
    execute(warehouse, "UPDATE strata.source_stamps SET engine = 'strata-fp-0/duckdb-0.0.0'")
    assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint == truth
    # With no record, a run that builds nothing scans, and records what it read for the next.
    execute(warehouse, "DELETE FROM strata.source_stamps")
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert len(recorded(warehouse)) == 1
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert len(recorded(warehouse)) == 1  # the record was taken: nothing new to record


WRITES = {
    "an update in place": ("UPDATE orders SET amount = amount + 1 WHERE id = 17",),
    "an insert": ("INSERT INTO orders VALUES (90000, 3, 25)",),
    "a delete": ("DELETE FROM orders WHERE id < 10",),
}


def test_every_write_to_a_settled_file_is_seen(stamped):
    project, warehouse, source = stamped
    settle()
    run_project(project, warehouse)
    for what, statements in WRITES.items():
        write_source(source, *statements)
        settle()  # the write's stamp settles: only a stamp equal to the recorded one could hide it
        result = run_project(project, warehouse, only_stale=True)
        assert result.run_id is not None, what
        assert_live_models_read_the_file(project, warehouse, source)
        assert observe_sources(project, warehouse, ["orders"])["orders"].fingerprint == fresh_fingerprint(
            project, warehouse.parent
        ), what
    assert len(recorded(warehouse)) == 1 + len(WRITES)


def test_commits_left_in_the_write_ahead_log_are_seen(stamped):
    project, warehouse, source = stamped
    settle()
    run_project(project, warehouse)
    for step in range(2):  # a new log, then a log that grows
        write_source(source, f"INSERT INTO orders VALUES ({70000 + step}, 1, 10)", checkpoint=False)
        assert source.with_name(source.name + ".wal").exists()
        settle()
        assert run_project(project, warehouse, only_stale=True).run_id is not None
        assert_live_models_read_the_file(project, warehouse, source)
    write_source(source, "CHECKPOINT")  # the log folded into the file: the same rows
    settle()
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert_live_models_read_the_file(project, warehouse, source)


def test_a_file_replaced_or_rewritten_with_its_old_times_is_seen(stamped):
    project, warehouse, source = stamped
    other = source.with_name("other.duckdb")
    write_source(
        other, "CREATE TABLE orders AS SELECT range AS id, 1 AS status, 2 AS amount FROM range(5000)"
    )
    third = source.with_name("third.duckdb")
    write_source(
        third, "CREATE TABLE orders AS SELECT range AS id, 2 AS status, 3 AS amount FROM range(5000)"
    )
    settle()
    run_project(project, warehouse)
    # Another file renamed onto the path: a new inode.
    os.replace(other, source)
    settle()
    assert run_project(project, warehouse, only_stale=True).run_id is not None
    assert_live_models_read_the_file(project, warehouse, source)
    # Another file's bytes written into it, its modification time then set back (`cp -p`, `rsync
    # -t`, an archive's extraction): the same inode, size and modification time; only the
    # status-change time, which no one can set, tells.
    before = os.stat(source)
    shutil.copyfile(third, source)
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(source)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    settle()
    assert run_project(project, warehouse, only_stale=True).run_id is not None
    assert_live_models_read_the_file(project, warehouse, source)


def test_a_file_written_just_before_a_run_is_scanned_and_not_recorded(stamped):
    project, warehouse, source = stamped
    assert not database_stamp(source).is_settled
    run_project(project, warehouse)
    assert recorded(warehouse) == []  # its stamp could still be its next write's
    write_source(source, "INSERT INTO orders VALUES (80000, 2, 9)")
    assert run_project(project, warehouse, only_stale=True).run_id is not None
    assert recorded(warehouse) == []
    assert_live_models_read_the_file(project, warehouse, source)
    settle()
    assert database_stamp(source).is_settled
    assert run_project(project, warehouse, only_stale=True).run_id is None
    assert len(recorded(warehouse)) == 1


def test_a_view_in_the_source_file_is_always_read(tmp_path):
    """A view's rows live elsewhere (here a Parquet file): its database file tells nothing of them."""
    rows = tmp_path / "orders.parquet"
    execute(tmp_path / "scratch.duckdb", f"COPY (SELECT range AS id FROM range(100)) TO '{rows}'")
    source = tmp_path / "ingest.duckdb"
    write_source(source, f"CREATE VIEW orders AS SELECT * FROM read_parquet('{rows}')")
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.strata").write_text(
        f"source orders {{\n  database: '{source}'\n  table: orders\n}}\nmodel copy {{\n  from orders\n}}\n"
    )
    warehouse = tmp_path / "warehouse.duckdb"
    settle()
    run_project(project, warehouse)
    execute(tmp_path / "scratch.duckdb", f"COPY (SELECT range AS id FROM range(150)) TO '{rows}'")
    settle()
    assert run_project(project, warehouse, only_stale=True).run_id is not None
    assert execute(warehouse, "SELECT count(*) FROM main.v_copy") == [(150,)]
    assert recorded(warehouse) == []


def test_a_read_only_look_at_a_warehouse_without_the_record_table_scans(stamped):
    """A sensor peeks read-only, without migrating: a warehouse made before records existed has
    no table of them, and its sources are scanned."""
    project, warehouse, source = stamped
    settle()
    run_project(project, warehouse)
    execute(warehouse, "DROP TABLE strata.source_stamps")
    truth = fresh_fingerprint(project, warehouse.parent)
    assert peek_source_fingerprints(project, warehouse, ["orders"], timeout=5) == {"orders": truth}


def test_verify_sources_rescans_a_stamped_file_and_replaces_a_record_it_contradicts(stamped):
    """A file system that kept a file's times through a write (simulated: the record of the old
    rows moved onto the new stamp) hides the write from every run; `verify --sources` finds it,
    and the record it leaves makes the next run rebuild."""
    project, warehouse, source = stamped
    settle()
    run_project(project, warehouse)
    clean = CliRunner().invoke(main, ["verify", str(project), "--warehouse", str(warehouse), "--sources"])
    assert clean.exit_code == 0, clean.output
    assert "orders: equal to the record of its files' stamp" in clean.output
    write_source(source, "UPDATE orders SET amount = amount + 1 WHERE id = 3")
    settle()
    assert_a_hidden_write_is_found_by_verify(project, warehouse, database_stamp(source).text)
    assert_live_models_read_the_file(project, warehouse, source)
    again = CliRunner().invoke(main, ["verify", str(project), "--warehouse", str(warehouse), "--sources"])
    assert again.exit_code == 0, again.output


def test_an_observation_records_its_scan_for_the_run_it_precedes(stamped):
    """Dagster observes a changed source before materializing what reads it: the run after takes
    the observation's record instead of scanning the file again."""
    project, warehouse, source = stamped
    settle()
    run_project(project, warehouse)
    write_source(source, "DELETE FROM orders WHERE id = 42")
    settle()
    observed = observe_sources(project, warehouse, ["orders"])["orders"]
    assert observed.fingerprint == fresh_fingerprint(project, warehouse.parent)
    assert [row[1] for row in recorded(warehouse)][-1] == database_stamp(source).text
    assert run_project(project, warehouse, only_stale=True).run_id is not None
    assert len(recorded(warehouse)) == 2  # the run took the observation's record
    assert_live_models_read_the_file(project, warehouse, source)
